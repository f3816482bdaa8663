"""The throughput check: every GPU alone, all at once; it opens the per-GPU launch the numerics job, copies and burn
ride."""

from __future__ import annotations

from bench.validate.checks import launches
from bench.validate.checks.base import Check


def _plan(p) -> None:
    riders = p.riders(launches.PER_GPU)
    lv = p.lv
    if p.cfg.repeats > 1:
        rounds, looks, why = p.cfg.repeats, 1, f"{p.cfg.repeats} rounds (--repeats), each GPU judged by its median"
    elif lv.repeats > 1:
        rounds, looks = lv.repeats, lv.repeats
        why = (f"the level's repeats: {lv.repeats} rounds in all (second looks) where the first names a GPU or a "
               f"node, each GPU then judged by its median: {lv.repeats_why}")
    else:
        rounds, looks = 1, 2
        why = f"the level's repeats: 1 round: {lv.repeats_why}"
    p.launch("throughput", lv.steps * p.step * p.cfg.repeats + sum(r.cost(p) for r in riders),
             f"every GPU alone, all at once: {lv.steps} steps of {p.model}, batch {p.batch}"
             + "".join(r.words(p) for r in riders) + f"; {why}", looks=looks, rendezvous=False, repeats=rounds,
             repeats_why=lv.repeats_why if p.cfg.repeats == 1 else "--repeats",
             second_look_s=round(p.start + lv.steps * p.step, 1))  # a later round: no numerics, copies or burn


CHECK = Check(
    name="throughput",
    launch=launches.PER_GPU,
    runs="bench.validate.gpus:throughput",
    plan=_plan,
    action=("drain: the GPU trains slower than its peers; read its health rows (clocks, PCIe, thermal), reseat or "
            "replace it, then validate again"),
    what=('every GPU of every node trains alone, all at once (one rank each, no communication): a row per '
          '`host:slot`'),
    judged=("the published figure for its GPU, precision and model, and lines derived from its model's peers "
            '(below)'))
