"""validate's numerics and matmul checks: the same deterministic job on every GPU at once, judged bit for bit.

The job (bench.worker.numerics, launched by bench.jobs.numerics) trains the
level's small ViT for a few steps from a fixed seed on a fixed batch, fp32,
deterministic algorithms, and multiplies integer matrices exactly; the
judgement is bench.analysis.numerics: GPUs of one model, driver and
software stack must agree bit for bit, and with the reference curve of
their stack where one is known (shipped in bench/data/numerics_reference.json,
or --numerics-reference FILE written by --save-numerics-reference on a
known-good node). The matmul row judges the timed matmul's TFLOP/s against
the published figure for the GPU and dtype, else the median of its model.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from importlib import resources as package_files
from typing import Any, Callable

from bench.analysis import numerics as judge_numerics
from bench.analysis.peer_lines import derive
from bench.core import results
from bench.core.capped import read_capped
from bench.core.errors import BadInput
from bench.jobs.numerics import NumericsSpec
from bench.validate import runs
from bench.validate.gpus import STRAGGLER_WARN, judge_both
from bench.validate.state import RANK, Validation

# The least noise of a matmul timed by the host clock on CPU cores the node's other ranks share: a healthy one came
# in 4% under its peers' median in one of 20 healthy quick validates here (3 hosts x 1 rank on two cores, load 3),
# past a 3% line drawn from each rank's own iterations (benchmarks/healthy_validates.py, 2026-12-06). A GPU's
# matmul, timed on the GPU, keeps peer_lines' 2% floor.
CPU_MATMUL_FLOOR = (0.10, "a matmul timed by the host clock on CPU cores other ranks share")

SHIPPED = "data/numerics_reference.json"


def entries(v: Validation, res: dict[str, list[int]], spec: NumericsSpec) -> dict[str, Any]:
    """The numerics job's entry per GPU of res: from the per-GPU runs that ran it first where they did (only
    the GPUs still in are judged), else from the link launch it shares with the node's all-reduce where the
    level measures no throughput (the prolog), else its own launch."""
    ahead = v.numerics_ahead
    if ahead is not None:
        keep = {(h, s) for h, slots in res.items() for s in slots}
        ranks = [r for r in ahead["ranks"] if (r["host"], r["slot"]) in keep]
        v.runs.setdefault("numerics", ahead.get("run_dir") or "")
        return {"ranks": ranks, "error": ahead.get("error")} if ranks else {"error": ahead.get("error") or {
            "where": "numerics", "reason": "the per-GPU runs gave no numerics entry"}}
    if not v.cfg.wanted("throughput") and v.cfg.wanted("intra-node") and all(len(s) >= 2 for s in res.values()):
        from bench.validate.links import intra_with_numerics

        rec = intra_with_numerics(v, res)
        if rec.get("numerics"):
            return {"ranks": rec["numerics"], "error": rec.get("error")}
        return rec
    return runs.numerics(v, res, spec)


def load_references(path: str | None) -> tuple[list[dict], str]:
    """(reference curves, where they came from): the shipped file, or the user's."""
    if path is None:
        text, where = package_files.files("bench").joinpath(SHIPPED).read_text("utf-8"), f"bench/{SHIPPED}"
    else:
        try:
            text, where = read_capped(path, 16 << 20, "--numerics-reference", "a numerics reference").decode(), path
        except UnicodeDecodeError:
            raise BadInput(f"--numerics-reference: {path} is not text (a binary file?): it must hold the JSON "
                           "--save-numerics-reference writes") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"{where}:{e.lineno}: not JSON ({e.msg})") from None
    curves = raw.get("curves") if isinstance(raw, dict) else None
    if not isinstance(curves, list):
        raise BadInput(f"{where}: must hold an object with a \"curves\" list")
    for i, c in enumerate(curves):
        ok = (isinstance(c, dict) and isinstance(c.get("platform"), dict) and isinstance(c.get("spec"), dict)
              and isinstance(c.get("losses"), list) and all(isinstance(x, (int, float)) for x in c["losses"])
              and isinstance(c.get("params_sha256"), str))
        if not ok:
            raise BadInput(f"{where}: curves[{i}]: needs platform, spec, losses (numbers) and params_sha256")
    return curves, where


def _stack(v: Validation, r: dict) -> dict[str, Any]:
    """The rank's own stack plus, on GPUs, the node's driver (which builds the kernels' PTX and runs them)."""
    stack = dict(r.get("stack") or {})
    if v.device == "cuda":
        stack["driver"] = (v.inventory.get(r["host"]) or {}).get("driver_version")
    return stack


def numerics(v: Validation) -> None:
    t0 = time.time()
    v.skip_left_out("numerics", per_gpu=True)
    v.skip_left_out("matmul", per_gpu=True)  # its row rides numerics' job: a GPU left out has neither, and says so
    res = v.good_resources()
    if not res:
        return
    curves, where = load_references(v.cfg.numerics_reference)
    spec = runs.numerics_spec(v)
    rec = entries(v, res, spec)
    ranks = rec.get("ranks") or []
    if not ranks:
        err = rec.get("error") or {}
        for h, slots in res.items():
            for s in slots:
                v.add_gpu("numerics", h, s, "ERROR", reason=f"could not be measured: the numerics run failed at "
                          f"{err.get('where')}: {err.get('reason')}", t0=t0)
        return
    ok = [{**r, "key": f"{r['host']}:{r['slot']}", "stack": _stack(v, r)} for r in ranks if r["status"] == "ok"]
    verdicts = {x.key: x for x in judge_numerics.judge(ok, spec.key(), curves,
                                                       trusted=v.cfg.numerics_reference is not None)}
    by_key = {r["key"]: r for r in ok}
    v.figures["numerics"] = {
        k: {"status": x.status, "first_step": x.first_step, "judged_by": x.judged_by,
            "losses": by_key[k]["losses"], "params_sha256": by_key[k]["params_sha256"],
            "stack": by_key[k]["stack"], "matmul_exact": by_key[k].get("matmul_exact")}
        for k, x in verdicts.items()}
    v.figures["numerics_spec"] = spec.key()
    v.figures["numerics_reference"] = where
    for r in ranks:
        key = f"{r['host']}:{r['slot']}"
        if r["status"] != "ok":
            measured = r.get("measured")
            v.add_gpu("numerics", r["host"], r["slot"], "FAIL" if measured else "ERROR", reason=(
                f"its run failed: {r.get('reason')}" if measured else f"could not be measured: {r.get('reason')}"),
                t0=t0)
            continue
        x = verdicts[key]
        losses = r["losses"]
        ref = {"reference": f"reference curve ({where})", "peers": f"{len(x.compared_with)} peer(s), same stack",
               "none": "none"}[x.judged_by]
        v.add_gpu("numerics", r["host"], r["slot"], x.status, f"{len(losses)} steps, loss {losses[0]:.6f} -> "
                  f"{losses[-1]:.6f}", ref, x.reason, t0=t0)

    def again(named: list[str]) -> list[dict]:
        """The numerics job once more on the nodes of the named GPUs (their every GPU: what shares their cores), one
        training step only: its curve was judged on the first run, only the matmul is timed again."""
        hosts = {k.rsplit(":", 1)[0] for k in named}
        first = v.runs.get("numerics")
        rec2 = runs.numerics(v, {h: s for h, s in res.items() if h in hosts}, dataclasses.replace(spec, steps=1))
        v.runs["matmul-again"] = v.runs.pop("numerics", "")  # the record keeps both runs
        if first is not None:
            v.runs["numerics"] = first
        return [r for r in rec2.get("ranks") or [] if r.get("status") == "ok"]

    _matmul(v, [r for r in ok], t0, again)
    # Each node's GPU rows, gathered in one pass over the rows: a pass per node was nodes x rows.
    gpu_rows: dict[str, list] = {}
    for c in v.checks:
        if c.check == "numerics" and c.gpu is not None:
            gpu_rows.setdefault(c.host, []).append(c)
    for h, slots in res.items():
        mine = gpu_rows.get(h, [])
        bad = [f"{c.node} {c.status}" for c in mine if c.status in ("FAIL", "ERROR", "WARN")]
        status = max((c.status for c in mine), key=RANK.__getitem__, default="SKIP")
        v.add("numerics", h, status, f"{len(mine)} GPU(s)", "its GPUs' rows",
              ("; ".join(bad) if bad else "every GPU of the node as its own row says") + " (summary row)", t0=t0)
    if v.cfg.save_numerics_reference:
        save_references(v, ok, verdicts, spec)


def best_noise(matmul: dict) -> float:
    """How far one GPU's best matmul time may move run to run: its fifth-fastest iteration over its fastest, less
    one (a best that its next four iterations come close to is a stable figure; one alone is luck)."""
    times = sorted(matmul.get("times_s") or [])
    return times[min(4, len(times) - 1)] / times[0] - 1 if len(times) >= 2 and times[0] > 0 else 0.0


def _matmul(v: Validation, ok: list[dict], t0: float, again: Callable[[list[str]], list[dict]] | None = None) -> None:
    """Each GPU's matmul row. A FAIL is one timing window: GPUs that share cores, power or cooling can be unlucky
    once (6 CPU ranks on 2 shared cores through mpirun FAILed a healthy one at -46% against a 12% line), so where
    `again` can re-time them the named GPUs' nodes are timed once more and each of their GPUs keeps its faster
    matmul (as the throughput check keeps a GPU's faster round: gpu_rounds.take): slow in both is slow."""
    rows = _matmul_rows(v, ok)
    named = [k for k, row in rows.items() if row[0] == "FAIL"]
    if named and again is not None:
        second = {f"{r['host']}:{r['slot']}": r.get("matmul") or {} for r in again(named)}
        better = []
        for r in ok:
            first, more = r.get("matmul") or {}, second.get(r["key"]) or {}
            if (more.get("flops_per_s") or 0) > (first.get("flops_per_s") or 0):
                r = {**r, "matmul": more}
            better.append(r)
        rows = _matmul_rows(v, better)
        firsts = {r["key"]: r.get("matmul") or {} for r in ok}
        for k in named:
            row = rows[k]
            note = (f"; timed twice (its first FAILed): the faster of {_tflops(firsts[k])} and "
                    f"{_tflops(second[k])} kept" if k in second else
                    "; its second timing gave no figure: the first kept")
            rows[k] = row[:3] + (row[3] + note,) + row[4:]
        ok = better
    for r in ok:
        status, value, ref, reason, figure = rows[r["key"]]
        v.add_gpu("matmul", r["host"], r["slot"], status, value or "", ref or "", reason, t0=t0, figure=figure)


def _tflops(matmul: dict) -> str:
    rate = matmul.get("flops_per_s")
    return f"{rate / 1e12:.3g} TFLOP/s" if rate else "none"


def _matmul_rows(v: Validation, ok: list[dict]) -> dict[str, tuple]:
    """{key: (status, value, reference, reason, figure)} per GPU: its row, not yet added."""
    out: dict[str, tuple] = {}
    rates = {r["key"]: (r.get("matmul") or {}).get("flops_per_s") for r in ok}
    model = {r["key"]: v.gpu_name(r["host"], r["slot"]) for r in ok}
    # A model's peers and the lines derived from them are the same for each of its GPUs: made once per model,
    # not once per GPU (N^2).
    peers: dict[str, tuple[list[float], Any]] = {}
    for r in ok:
        m = r.get("matmul") or {}
        rate, dtype = m.get("flops_per_s"), m.get("dtype")
        name = model[r["key"]]
        if not rate:
            out[r["key"]] = ("SKIP", None, None, "no timed matmul in its report", None)
            continue
        if name not in peers:
            same = [q for q in ok if rates[q["key"]] and model[q["key"]] == name]
            peers[name] = ([rates[q["key"]] for q in same],
                           derive([rates[q["key"]] for q in same], [best_noise(q.get("matmul") or {}) for q in same],
                                  straggler=STRAGGLER_WARN, se_name="gap of the fifth-best iteration to the best",
                                  **({"floor": CPU_MATMUL_FLOOR} if v.device == "cpu" else {})))
        value = f"{rate / 1e12:.3g} TFLOP/s ({dtype}, n={m.get('n')})"
        p = v.table.matmul_for(name, dtype)
        ref = (p.flops, p.lower, p.upper, f"{p.flops / 1e12:g} TFLOP/s ({p.gpu}, {p.dtype})", p.source) if p else None
        got = judge_both(rate, ref, peers[name][0], v.table.relative, lambda med: f"{name} {med / 1e12:.3g} TFLOP/s",
                         peers[name][1])
        if got is None:
            out[r["key"]] = ("SKIP", value, "none", f"no published matmul figure for {name} ({dtype}) and no other "
                             "of its model here: nothing to judge it against", rate)
            continue
        reason = got[2] if p else f"{got[2]}; no published matmul figure for {name} ({dtype})"
        out[r["key"]] = (got[0], value, got[1], reason, rate)
    return out


def save_references(v: Validation, ok: list[dict], verdicts: dict, spec: NumericsSpec) -> None:
    """The curve of every stack none of whose GPUs FAILed, for --numerics-reference: agreed on by peers, or one
    GPU's alone (a lone GPU's curve is only as good as that GPU: the entry says so)."""
    groups: dict[tuple, list[dict]] = {}
    for r in ok:
        groups.setdefault(judge_numerics.stack_key(r["stack"]), []).append(r)
    curves = []
    for members in groups.values():
        if all(verdicts[m["key"]].status != "FAIL" for m in members):
            first = members[0]
            how = (f"{len(members)} GPU(s) agreed bit for bit" if len(members) > 1 else
                   "one GPU alone, not confirmed by a peer: record it on a node you trust")
            curves.append({"platform": first["stack"], "spec": spec.key(), "losses": first["losses"],
                           "params_sha256": first["params_sha256"],
                           "source": f"bench validate {os.path.basename(v.vdir)}: {how} "
                                     f"({', '.join(m['key'] for m in members[:4])})"})
    v.figures["numerics_saved"] = {"file": v.cfg.save_numerics_reference, "curves": len(curves)}
    results.write_json_atomic(v.cfg.save_numerics_reference, {"_about": [
        "Reference loss curves of bench validate's numerics job, made by --save-numerics-reference: one per "
        "platform (device model, driver, software stack) whose GPUs all agreed bit for bit."], "curves": curves})
