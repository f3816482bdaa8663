"""GPUs of more than one vendor in one run: refused, with the reason and what to run instead.

    from bench.cluster.vendor_mix import vendor_of, check
    vendor_of({"name": "AMD Instinct MI300X", "vendor": "amd"})   # "amd"
    check(inventories, findings)      # adds "vendor-mixed" (fail) to hetero's findings where the GPUs' vendors differ
    backend([(host, gpu, spec), ...])  # "amd": the accelerator backend that claims these GPUs ("cpu": none)

torch's `nccl` backend is NCCL in a CUDA build and RCCL in a ROCm build; a
process has one build, and NCCL and RCCL do not join one communicator, so one
data-parallel job cannot hold ranks of both (nor one image: the ROCm variant,
docker/Dockerfile.rocm, is its own). bench refuses the mix and names each
vendor's nodes, to be run as their own jobs (--exclude the others).
"""

from __future__ import annotations

from bench.cluster import accel

_NVIDIA = ("NVIDIA", "TESLA", "QUADRO", "GEFORCE", "TITAN")


def vendor_of(gpu: dict) -> str | None:
    """A GPU's vendor: the inventory's "vendor" where its backend set one, else by its name; None if unknown."""
    if gpu.get("vendor"):
        return str(gpu["vendor"])
    name = str(gpu.get("name") or "").upper()
    if "INSTINCT" in name or name.startswith(("AMD", "MI")):
        return "amd"
    return "nvidia" if name.startswith(_NVIDIA) else None


def backend(gpus: list) -> str:
    """The accelerator backend (bench.cluster.accel) whose GPUs these are, as hetero holds them ((host, gpu,
    spec) each): the one a launch on them names (bench.launch.node --accel); "cpu" where there are none."""
    return accel.detect({"gpus": [g for _, g, _ in gpus]}).name


def check(inventories: list[dict], f) -> None:
    """f: hetero's findings (f.add(level, code, message, hosts))."""
    by: dict[str, list[str]] = {}
    for inv in inventories:
        host = str(inv.get("host") or inv.get("hostname") or "?")
        for g in inv.get("gpus") or []:
            if (v := vendor_of(g)) and host not in by.setdefault(v, []):
                by[v].append(host)
    if len(by) < 2:
        return
    said = "; ".join(f"{v.upper()} on {', '.join(hs[:4])}"
                     + (f" and {len(hs) - 4} more" if len(hs) > 4 else "") for v, hs in by.items())  # fmt: skip
    f.add("fail", "vendor-mixed", f"GPUs of more than one vendor: {said}: one data-parallel run cannot span them "
          "(torch's nccl is NCCL on CUDA builds, RCCL on ROCm builds; they share no communicator, and no image "
          "holds both); run each vendor's nodes as their own job, --exclude the others", [h for hs in by.values()
                                                                                         for h in hs])  # fmt: skip
