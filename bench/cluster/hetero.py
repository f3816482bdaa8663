"""Is this cluster uniform, and what follows if it is not: the verdict over node inventories.

    from bench.cluster.hetero import verdict
    v = verdict([inv1, inv2, ...], precision="fp16", micro_batch=64, mem_per_sample_gb=0.09)
    v["level"]                      # "ok" | "warn" | "fail"
    for f in v["findings"]: print(f["level"], f["code"], f["message"], f["hosts"])

Data parallelism runs every rank in lock step, so one slow, small or
unsupported GPU sets the pace, the batch and the precision of all of them
(the study's Tesla cluster, RTX 3070 + GTX 1070 + Tesla P4, got no speedup
at all). Finding codes are stable, for grep: vendor-mixed, gpu-model-mixed,
gpu-memory-mixed, gpu-cc-mixed, driver-mixed, <library>-version-mixed,
<library>-missing, image-mixed, python-mixed, no-gpu, cpu-only, gpu-unknown,
arch-not-built, arch-unknown, image-variant, precision-unsupported, precision-partial,
precision-none, compile-unsupported, straggler, micro-batch-too-big,
micro-batch-fits, memory-floor. Inventories: probe.node_inventory dicts. v["accel"]: the GPUs' backend.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from bench.cluster import readiness, variants, vendor_mix
from bench.core.gpus import (PRECISIONS, WHY_UNSUPPORTED, GpuSpec, is_truncated, lookup, parse_cc, peak_tflops,
                             supports)
from bench.cluster.probe import LIBRARIES, torch_built_for
from bench.core.accel_names import by_device

# Codes that make a cluster non-uniform; the others are consequences or notes.
MISMATCH = {"gpu-model-mixed", "gpu-memory-mixed", "gpu-cc-mixed", "driver-mixed", "image-mixed",
            "python-mixed", "no-gpu"} | {f"{lib}-version-mixed" for lib in ("bench", *LIBRARIES)}  # fmt: skip
# The same model reports slightly different totals (ECC on/off, driver reservations).
_MEMORY_SLACK = 0.02
_LEVELS = {"info": 0, "ok": 0, "warn": 1, "fail": 2}


def _host(inv: dict) -> str:
    return str(inv.get("host") or inv.get("hostname") or "?")


def _names(hosts) -> str:
    hosts = list(dict.fromkeys(hosts))
    return ", ".join(hosts[:8]) + (f" and {len(hosts) - 8} more" if len(hosts) > 8 else "")


def _label(gpu: dict, spec: GpuSpec | None) -> str:
    return spec.name if spec else str(gpu.get("name") or "unknown GPU")


def _group(pairs) -> dict:
    """[(value, host)] -> {value: [hosts]} in first-seen order, hosts unique."""
    out: dict = defaultdict(dict)  # hosts as a dict's keys: `in` on a list made a uniform cluster's hosts^2
    for value, host in pairs:
        out[value][host] = None
    return {value: list(hosts) for value, hosts in out.items()}


def _spread(groups: dict, fmt=str) -> str:
    return "; ".join(f"{fmt(v)} on {_names(h)}" for v, h in groups.items())


def exclude_spec(drop: dict[str, list[int]], gpu_counts: dict[str, int]) -> str:
    """{host: [gpu indices]} -> a DeepSpeed --exclude value: 'host' for a whole host, else 'host:0,2'."""
    parts = []
    for host, idx in drop.items():
        idx = sorted(set(idx))
        parts.append(host if len(idx) >= gpu_counts.get(host, 0) else f"{host}:{','.join(map(str, idx))}")
    return "@".join(parts)


class _Findings(list):
    def add(self, level: str, code: str, message: str, hosts) -> None:
        self.append({"level": level, "code": code, "message": message, "hosts": list(dict.fromkeys(hosts))})


def verdict(
    inventories: list[dict],
    precision: str | None = None,
    micro_batch: int | None = None,
    mem_per_sample_gb: float | None = None,
    compile: bool = False,
) -> dict:
    """The heterogeneity verdict; see the module docstring. mem_per_sample_gb is in GiB (2**30 bytes); compile:
    the run asks for torch.compile (--compile)."""
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
    f = _Findings()
    hosts = [_host(inv) for inv in inventories]
    gpus = [(_host(inv), g, lookup(g["name"], g.get("memory_mib")) if g.get("name") else None)
            for inv in inventories for g in inv.get("gpus") or []]  # fmt: skip
    gpu_hosts = list(dict.fromkeys(h for h, _, _ in gpus))
    counts = dict(Counter(h for h, _, _ in gpus))  # in gpu_hosts' order; a scan of every GPU per host was N^2
    _versions(inventories, f)
    result: dict = {"hosts": hosts, "gpu_hosts": gpu_hosts, "gpus": len(gpus), "accel": vendor_mix.backend(gpus),
                    "precision": precision, "precisions": [], "slowest": None, "fastest": None, "ratio": None,
                    "exclude": None, "min_memory_mib": None, "min_memory_hosts": [], "max_micro_batch": None}
    # A node whose slots all lie beyond its GPUs keeps none after selection (inventory.selected), yet it has
    # GPUs (all_gpu_count): it is never GPU-less, and the readiness check refuses its slots.
    no_gpu = [inv for inv in inventories if not inv.get("gpus") and not inv.get("all_gpu_count")]
    if not gpus and len(no_gpu) < len(inventories):
        readiness.check(inventories, f)
        return _finish(result, f)
    if not gpus:
        why = _spread(_group((inv.get("gpu_error") or "no reason recorded", _host(inv)) for inv in no_gpu))
        f.add("info", "cpu-only", f"no GPU on any node ({why}): a CPU/gloo run", hosts)
        result["precisions"] = ["fp32"]
        return _finish(result, f)
    for inv in no_gpu:
        f.add("fail", "no-gpu", f"{_host(inv)} has no GPU ({inv.get('gpu_error') or 'no reason recorded'}) while "
              f"{_names(gpu_hosts)} have: its rank cannot join the GPU job; fix its driver or --exclude {_host(inv)}",
              [_host(inv)])  # fmt: skip
    _mix(gpus, inventories, gpu_hosts, f)
    for check in (vendor_mix.check, _arch, readiness.check):   # each (inventories, findings)
        check(inventories, f)
    result["precisions"] = _precision(gpus, gpu_hosts, precision, f)
    if compile:
        _compile(gpus, f)
    result.update(_straggler(gpus, counts, precision or "fp32", f))
    result.update(_memory(gpus, micro_batch, mem_per_sample_gb, f))
    return _finish(result, f)


def _finish(result: dict, f: _Findings) -> dict:
    worst = max((_LEVELS[x["level"]] for x in f), default=0)
    result["level"] = ("ok", "warn", "fail")[worst]
    result["uniform"] = not any(x["code"] in MISMATCH for x in f)
    result["findings"] = list(f)
    return result


def _flat(groups: dict) -> list[str]:
    return [h for hosts in groups.values() for h in hosts]


def _versions(inventories: list[dict], f: _Findings) -> None:
    for lib in ("bench", *LIBRARIES):
        groups = _group(((inv.get("versions") or {}).get(lib), _host(inv)) for inv in inventories)
        if len(groups) < 2:
            continue
        if None in groups:
            present = _spread({k: v for k, v in groups.items() if k})
            f.add("fail", f"{lib}-missing", f"{lib} is not installed on {_names(groups[None])} but is elsewhere "
                  f"({present}): those nodes cannot run", groups[None])  # fmt: skip
        else:
            f.add("warn", f"{lib}-version-mixed", f"{lib} versions differ: {_spread(groups)}; the ranks run "
                  "different code, so collectives, numerics and timings are not one configuration",
                  _flat(groups))  # fmt: skip
    images = _group((inv.get("image"), _host(inv)) for inv in inventories)
    if len(images) > 1:
        f.add("warn", "image-mixed", f"container images differ: {_spread(images, lambda v: v or 'no image')}",
              _flat(images))  # fmt: skip
    pythons = _group(((inv.get("python") or {}).get("version", "")[:4] or None, _host(inv)) for inv in inventories)
    pythons.pop(None, None)
    if len(pythons) > 1:
        f.add("warn", "python-mixed", f"Python versions differ: {_spread(pythons)}", _flat(pythons))


def _mix(gpus, inventories: list[dict], gpu_hosts: list[str], f: _Findings) -> None:
    models = _group((_label(g, s), h) for h, g, s in gpus)
    if len(models) > 1:
        within = [h for h in gpu_hosts if len({_label(g, s) for x, g, s in gpus if x == h}) > 1]
        note = f" (mixed within {_names(within)})" if within else ""
        f.add("warn", "gpu-model-mixed", f"mixed GPU models{note}: {_spread(models)}", gpu_hosts)
    mems = sorted({g["memory_mib"] for _, g, _ in gpus if g.get("memory_mib")})
    if mems and mems[-1] > mems[0] * (1 + _MEMORY_SLACK):
        groups = dict(sorted(_group((g["memory_mib"], h) for h, g, _ in gpus if g.get("memory_mib")).items()))
        f.add("warn", "gpu-memory-mixed", f"GPU memory differs: {_spread(groups, lambda m: f'{m} MiB')}", gpu_hosts)
    ccs = _group((g.get("cc") or "unknown", h) for h, g, _ in gpus)
    if len(ccs) > 1:
        f.add("warn", "gpu-cc-mixed", f"compute capabilities differ: {_spread(ccs, lambda c: f'sm {c}')}; "
              "kernels, precisions and speed differ with them", gpu_hosts)  # fmt: skip
    drivers = _group((inv.get("driver_version") or "unknown", _host(inv)) for inv in inventories if inv.get("gpus"))
    if len(drivers) > 1:
        f.add("warn", "driver-mixed", f"NVIDIA drivers differ: {_spread(drivers)}", gpu_hosts)
    for h, g, s in gpus:
        if s is None:
            cut = is_truncated(str(g.get("name") or ""))
            why = (by_device("cuda")["name_cut"] if cut
                   else f"add it to bench/data/{'amd_' * (vendor_mix.vendor_of(g) == 'amd')}gpu_specs.json")
            f.add("warn", "gpu-unknown", f"GPU {g.get('index')} on {h}, {g.get('name')!r}, is not in the GPU table "
                  f"({why}): its peak is unknown and the straggler check leaves it out", [h])  # fmt: skip


def _arch(inventories: list[dict], f: _Findings) -> None:
    ccs: dict[str, list[str]] = {}
    arch_lists = []
    for inv in inventories:
        t = inv.get("torch") or {}
        arch_list = t.get("arch_list")
        arch_lists.append(arch_list)
        for g in inv.get("gpus") or []:
            if g.get("cc"):
                ccs.setdefault(g["cc"], []).append(_host(inv))
            built = g.get("torch_built_for")
            if built is None and arch_list and g.get("cc"):
                built = torch_built_for(g["cc"], arch_list)
            if built is False:
                cc = g["cc"].replace(".", "")
                fits = variants.for_capability(g["cc"])
                use = f"use the {fits[0].label()}" if fits else f"install a torch built for sm_{cc}"
                f.add("fail", "arch-not-built", f"torch {t.get('version') or '?'} on {_host(inv)} has kernels for "
                      f"{' '.join(arch_list or ['?'])} only; its {g.get('name')} (GPU {g.get('index')}) is sm_{cc}: "
                      f"'no kernel image is available', this node cannot run; {use}, or "
                      f"--exclude {_host(inv)}", [_host(inv)])  # fmt: skip
            elif built is None and arch_list and not g.get("cc"):
                f.add("warn", "arch-unknown", f"compute capability of GPU {g.get('index')} on {_host(inv)} "
                      "is unknown: cannot check that torch has kernels for it", [_host(inv)])  # fmt: skip
    if ccs:
        same = arch_lists[0] if all(a == arch_lists[0] for a in arch_lists) else None
        f.add("info", "image-variant", variants.advice({c: list(dict.fromkeys(h)) for c, h in ccs.items()}, same),
              _flat(ccs))


def _precision(gpus, gpu_hosts: list[str], precision: str | None, f: _Findings) -> list[str]:
    common = []
    for p in PRECISIONS:
        lacking = list(dict.fromkeys(h for h, g, _ in gpus if not supports(g.get("cc") or g.get("gfx"), p)))
        if not lacking:
            common.append(p)
            continue
        who = _spread(_group((f"{_label(g, s)} (sm {g.get('cc') or '?'})", h) for h, g, s in gpus if h in lacking))
        if precision == p:
            f.add("fail", "precision-unsupported", f"{p} was asked for but {who} cannot: {WHY_UNSUPPORTED[p]}; "
                  f"train in a precision every node supports or --exclude {'@'.join(lacking)}", lacking)  # fmt: skip
        elif len(lacking) < len(gpu_hosts):
            f.add("warn", "precision-partial", f"{p} only on some nodes: {who} cannot; {WHY_UNSUPPORTED[p]}; "
                  "a run must use a precision all nodes support", lacking)  # fmt: skip
        else:
            f.add("info", "precision-none", f"no node can train in {p}: {WHY_UNSUPPORTED[p]}", lacking)
    return common


# Inductor (torch.compile's backend) writes Triton kernels: torch 2.7.1 and 2.14.1 raise GPUTooOldForTriton below
# 7.0 at the first forward (torch/_inductor/scheduler.py, create_backend): Pascal, the Pascal image's audience.
COMPILE_MIN_CC = (7, 0)


def _compile(gpus, f: _Findings) -> None:
    old = [(h, g, s) for h, g, s in gpus if (parse_cc(g.get("cc")) or (0, 0)) < COMPILE_MIN_CC]
    if old:
        who = _spread(_group((f"{_label(g, s)} (sm {g.get('cc') or '?'})", h) for h, g, s in old))
        hosts = list(dict.fromkeys(h for h, _, _ in old))
        f.add("fail", "compile-unsupported", f"--compile: torch.compile's Inductor writes Triton kernels, which need "
              f"compute capability 7.0 or newer; {who} cannot run them: drop --compile or --exclude "
              f"{'@'.join(hosts)}", hosts)


def _straggler(gpus, counts: dict[str, int], precision: str, f: _Findings) -> dict:
    known = [(h, g, s) for h, g, s in gpus if s is not None]
    if not known:
        return {}
    prec = precision if all(peak_tflops(s, precision) for _, _, s in known) else "fp32"
    peak = {id(g): peak_tflops(s, prec) for _, g, s in known}
    hs, gs, ss = min(known, key=lambda x: peak[id(x[1])])
    hf, gf, sf = max(known, key=lambda x: peak[id(x[1])])
    slow, fast = peak[id(gs)], peak[id(gf)]
    out = {"slowest": {"host": hs, "index": gs.get("index"), "model": ss.name, "peak_tflops": slow, "precision": prec},
           "fastest": {"host": hf, "index": gf.get("index"), "model": sf.name, "peak_tflops": fast, "precision": prec},
           "ratio": round(fast / slow, 2)}  # fmt: skip
    if fast <= slow:
        return out
    drop: dict[str, list[int]] = defaultdict(list)
    for h, g, _ in known:
        if peak[id(g)] < fast:
            drop[h].append(g.get("index"))
    out["exclude"] = exclude_spec(dict(drop), counts)
    n, total = len(known), sum(peak.values())
    slow_hosts = [h for h, g, _ in known if peak[id(g)] == slow]
    f.add("warn", "straggler", f"every step waits for the slowest GPU, {ss.name} on {_names(slow_hosts)} "
          f"({slow:g} TFLOP/s {prec} peak), {fast / slow:.1f}x below the fastest, {sf.name} ({fast:g}): "
          f"the {n} GPUs run at most like {n} x {ss.name}, {n * slow:g} of the {total:g} TFLOP/s they add up to "
          f"({100 * n * slow / total:.0f}%); to keep only the fastest model: --exclude {out['exclude']}",
          slow_hosts)  # fmt: skip
    return out


def _memory(gpus, micro_batch: int | None, per_sample: float | None, f: _Findings) -> dict:
    sized = [(h, g) for h, g, _ in gpus if g.get("memory_mib")]
    if not sized:
        return {}
    low = min(g["memory_mib"] for _, g in sized)
    low_hosts = list(dict.fromkeys(h for h, g in sized if g["memory_mib"] == low))
    out: dict = {"min_memory_mib": low, "min_memory_hosts": low_hosts}
    low_gib = low / 1024
    if per_sample:
        out["max_micro_batch"] = math.floor(low_gib / per_sample)
    if micro_batch and per_sample:
        need = micro_batch * per_sample
        if need > low_gib:
            f.add("fail", "micro-batch-too-big", f"micro batch {micro_batch} needs about {need:.1f} GiB per GPU but "
                  f"the smallest GPU memory is {low_gib:.1f} GiB on {_names(low_hosts)}: at most "
                  f"{out['max_micro_batch']} fits there", low_hosts)  # fmt: skip
        else:
            f.add("info", "micro-batch-fits", f"micro batch {micro_batch} needs about {need:.1f} GiB per GPU; "
                  f"the smallest GPU memory is {low_gib:.1f} GiB on {_names(low_hosts)}", low_hosts)  # fmt: skip
    elif micro_batch and len({g["memory_mib"] for _, g in sized}) > 1:
        f.add("info", "memory-floor", f"micro batch {micro_batch} must fit the smallest GPU memory, "
              f"{low_gib:.1f} GiB on {_names(low_hosts)}", low_hosts)  # fmt: skip
    return out
