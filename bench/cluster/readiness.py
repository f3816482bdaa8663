"""Can each node run the job at all? Findings for the verdict (bench.cluster.hetero) before anything launches.

    check(inventories, findings)   # adds "fail" / "warn" findings, each naming its node

  driver-too-old     the driver's CUDA version (as the GPU backend reads it) is of
                     an older major than the CUDA torch was built for: CUDA cannot
                     start; an older minor of the same major is a warning (CUDA's
                     minor-version compatibility runs it, but PTX of the newer
                     minor cannot be JIT-compiled)
  torch-no-cuda      the node has GPUs but its torch says torch.cuda.is_available()
                     is False (a CPU wheel, a broken driver, no /dev/nvidia*)
  slots-beyond-gpus  the hostfile gives the node more slots than it has GPUs:
                     ranks past the last GPU would crash on an invalid device
  mig-enabled        a selected GPU is in MIG mode: bench places one rank per
                     physical GPU by index and cannot address MIG instances
Inventories are bench.cluster.probe dicts, limited to the selected GPUs
(bench.cluster.inventory.selected) and carrying their slots.
"""

from __future__ import annotations

import re

from bench.core.accel_names import by_device

_GPU = by_device("cuda")   # the GPU backend's words for its tools (bench/data/accelerators.json)


def _major_minor(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return (int(m[1]), int(m[2])) if m else None


def check(inventories: list[dict], f) -> None:
    for inv in inventories:
        gpus = inv.get("gpus") or []
        host = inv.get("host", "?")
        _slots(inv, host, f)  # on the GPU count before selection: it may have left this node none
        if not gpus:
            continue
        torch = inv.get("torch") or {}
        driver, built = _major_minor(inv.get("cuda_driver_version")), _major_minor(torch.get("cuda"))
        if driver and built and driver < built:
            level = "fail" if driver[0] < built[0] else "warn"
            f.add(level, "driver-too-old",
                  f"{host}: driver {inv.get('driver_version') or '?'} supports CUDA {inv['cuda_driver_version']}, "
                  f"torch {torch.get('version') or '?'} was built for CUDA {torch['cuda']}: "
                  + ("CUDA cannot start; update the driver or install a torch built for CUDA "
                     f"{driver[0]}.x, or --exclude {host}" if level == "fail" else
                     "runs by CUDA's minor-version compatibility, but kernels shipped as newer PTX cannot be "
                     "compiled; update the driver"), [host])
        if torch.get("cuda_available") is False:
            f.add("fail", "torch-no-cuda", f"{host} has {len(gpus)} GPU(s) but its torch "
                  f"{torch.get('version') or '?'} cannot use them (torch.cuda.is_available() is False: a CPU "
                  f"build, or the driver or /dev/nvidia* is not usable there); fix it or --exclude {host}", [host])
        for g in gpus:
            if str(g.get("mig") or "").lower() == "enabled":
                f.add("fail", "mig-enabled", f"GPU {g.get('index')} ({g.get('name') or '?'}) on {host} is in MIG "
                      "mode: bench places one rank per physical GPU by index and cannot address MIG instances; "
                      f"disable MIG there ({_GPU['mig_off'].format(index=g.get('index'))}) or --exclude "
                      f"{host}:{g.get('index')}", [host])


def _slots(inv: dict, host: str, f) -> None:
    slots, have = inv.get("slots"), inv.get("all_gpu_count")
    if slots and have and max(slots) >= have:
        keep = [s for s in slots if s < have]
        way = f"--include {host}:{','.join(map(str, keep))}" if keep else f"slots={have} at most, or --exclude {host}"
        if inv.get("probe_tasks"):  # probed through srun: the slots are the allocation's tasks (task_gpus)
            f.add("fail", "slots-beyond-gpus", f"{host}: the allocation has {len(slots)} task(s) there but they "
                  f"were given {have} GPU(s) between them (each srun task's {_GPU['tool']}, merged by PCI bus): some "
                  "ranks would share a GPU or have none; ask for one GPU per task (--gpus-per-task=1) or "
                  f"--ntasks-per-node={have}", [host])
            return
        f.add("fail", "slots-beyond-gpus", f"{host}: the hostfile selects slot(s) {[s for s in slots if s >= have]} "
              f"but the node has {have} GPU(s) ({_GPU['tool']}): those ranks would have no GPU; fix its slots= or {way}",
              [host])
