"""Which image variant a set of GPUs needs: the torch each variant pins, and the GPUs it has kernels for.

    for_capability("6.1")              # [Variant(name='pascal', ...)]: only the Pascal variant runs a GTX 1070
    advice({"tesla-node4": ["6.1"], "tesla-node1": ["8.6"]}, running=["sm_75", ...])
    -> "image variant pascal (torch 2.7.1+cu126, `docker/build.sh --variant pascal`) has kernels for every GPU here ..."

The variants and their arch lists live in bench/data/image_variants.json,
written from each lock's header (tests/unit/test_variants.py keeps them
equal; make docker-test reads torch.cuda.get_arch_list() in each built image).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

from bench.cluster.probe import torch_built_for


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    lock: str
    build: str
    base_image: str
    torch: str
    cuda: str
    arch_list: tuple[str, ...]
    gpus: str

    def label(self) -> str:
        return f"image variant {self.name} (torch {self.torch}, `{self.build}`)"


@functools.cache
def variants() -> tuple[Variant, ...]:
    raw = json.loads(resources.files("bench").joinpath("data/image_variants.json").read_text("utf-8"))
    return tuple(Variant(**{**v, "arch_list": tuple(v["arch_list"])}) for v in raw["variants"])


def for_capability(cc: str) -> list[Variant]:
    """The variants whose torch has kernels for a GPU of compute capability cc."""
    return [v for v in variants() if torch_built_for(cc, list(v.arch_list))]


def running(arch_list: list[str] | None) -> Variant | None:
    """The variant whose pinned torch has exactly this arch list (a node's torch), or None."""
    return next((v for v in variants() if arch_list is not None and list(v.arch_list) == list(arch_list)), None)


def advice(hosts_by_cc: dict[str, list[str]], arch_list: list[str] | None = None) -> str:
    """One sentence: which variant runs every GPU here, and what each other variant lacks.

    hosts_by_cc: {compute capability: [hosts]}; arch_list: the nodes' torch, to name the variant they run.
    """
    ccs = sorted(hosts_by_cc, key=lambda c: tuple(int(x) for x in c.split(".")))
    shown = ", ".join(f"sm_{c.replace('.', '')} ({', '.join(hosts_by_cc[c][:3])}"
                      f"{' ...' if len(hosts_by_cc[c]) > 3 else ''})" for c in ccs)
    fits = [v for v in variants() if all(torch_built_for(c, list(v.arch_list)) for c in ccs)]
    lacks = []
    for v in variants():
        if v not in fits:
            missing = [f"sm_{c.replace('.', '')}" for c in ccs if not torch_built_for(c, list(v.arch_list))]
            lacks.append(f"{v.name} (torch {v.torch}) has no kernels for {', '.join(missing)}")
    now = running(arch_list)
    here = f"; the nodes run {now.name}" if now else ""
    if not fits:
        return (f"GPUs {shown}: no one image variant has kernels for all of them ({'; '.join(lacks)}): "
                f"split the cluster by variant or --exclude the nodes of one{here}")
    best = fits[0]
    also = f" (so does {', '.join(v.name for v in fits[1:])})" if len(fits) > 1 else ""
    rest = f"; {'; '.join(lacks)}" if lacks else ""
    return f"GPUs {shown}: {best.label()} has kernels for every GPU here{also}{rest}{here}"
