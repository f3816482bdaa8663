"""How a run's ranks split into tensor-parallel, pipeline and data-parallel groups (T x P x D), torch-free.

    check_config(cfg)                       # BadInput naming the option where --tensor-parallel cannot run
    lay = layout(resources, tensor=2)       # {"tensor_parallel": 2, "data_parallel": 2, "tp_groups": [[0, 1], [2, 3]], ...}
    check_placement(cfg, resources)         # a TP group must stay inside a node unless asked otherwise

Rank order. The launchers number ranks node by node in the hostfile's order
(a node's slots consecutively), and the ranks form a (data-parallel,
tensor-parallel) grid with the tensor-parallel index innermost, as torch's
init_device_mesh lays out a (D, T) mesh and DeepSpeed's AutoTP groups its
ranks: rank = d T + t. So a TP group is T consecutive ranks, inside one
node whenever T divides every node's rank count: TP's all-reduces run in
every block, forward and backward, and want the node's fastest link
(NVLink), while data parallelism's one reduction per step can cross nodes.
Pipeline stages (DeepSpeed's PipelineModule) do not compose with TP in
DeepSpeed 0.19.8 (check_config says why), so a grid is T x D or P x D.
"""

from __future__ import annotations

from typing import Any, Callable

from bench.core.errors import BadInput
from bench.core.model_size import shape_of
from bench.core.models import resolve_model
from bench.core.options import option_name

PIPELINE_TP = ("DeepSpeed 0.19.8's pipeline engine and its AutoTP build different process groups (tried: a "
               "collective mismatch while the engine broadcasts the model), and DTensor parameters do not pass "
               "through DeepSpeed's pipeline engine")
DDP_TP = ("DDP replicates whole modules and does not take DTensor parameters: tensor parallelism runs under "
          "--engine fsdp2 (DTensor over a 2D mesh) or deepspeed (its AutoTP)")


def check_config(c, bad: Callable[[str, str], BadInput] | None = None) -> None:
    """The refusals of --tensor-parallel that the config alone decides (the placement's: check_placement)."""
    if bad is None:
        def bad(name: str, why: str) -> BadInput:
            return BadInput(f"{option_name(name)}: {why}")
    t = c.tensor_parallel
    if t < 1:
        raise bad("tensor_parallel", f"must be >= 1, got {t}")
    if t == 1:
        if c.tensor_parallel_across_nodes:
            raise bad("tensor_parallel_across_nodes", "needs --tensor-parallel T > 1")
        return
    if c.pipeline_stages > 1:
        raise bad("tensor_parallel", f"not with --pipeline-stages {c.pipeline_stages}: {PIPELINE_TP}")
    if c.engine == "ddp":
        raise bad("tensor_parallel", DDP_TP)
    if c.offload:
        raise bad("tensor_parallel", "bench runs tensor parallelism without --offload (not tried with AutoTP)")
    if c.compile:
        raise bad("tensor_parallel", "bench runs tensor parallelism without --compile (DTensor under "
                  "torch.compile is not what the figures were checked on)")
    dims = split_dims(c.model, c.img_size)
    if dims is not None:
        heads, mlp = dims
        if heads % t:
            raise bad("tensor_parallel", f"{c.model} has {heads} attention heads, which {t} does not divide "
                      "(each rank computes whole heads)")
        if mlp % t:
            raise bad("tensor_parallel", f"{c.model}'s MLP width {mlp} does not divide by {t}")


def split_dims(model: str, img_size: int | None) -> tuple[int, int] | None:
    """(heads, MLP width) of a ViT bench knows the shape of; None otherwise (the ranks check what they built)."""
    try:
        shape = shape_of(resolve_model(model, img_size, 10))
    except KeyError:
        return None
    if shape is None:
        return None
    return shape.heads, int(shape.width * shape.mlp_ratio)


def model_divides(model: str, img_size: int | None, tensor: int) -> bool:
    """Whether T divides the model's heads and MLP width (False where bench does not know its shape)."""
    dims = split_dims(model, img_size)
    return dims is not None and dims[0] % tensor == 0 and dims[1] % tensor == 0


TP_BASES = ("fsdp2", "zero0", "zero1", "zero2", "zero3")


def tensor_parallel_of(strategy: str) -> tuple[str, int] | None:
    """("fsdp2", 2) for the strategy name "fsdp2+tp2" (a base of TP_BASES and T >= 2); None without +tp<T>.

    The memory suite and bench tune name their TP strategies so: FSDP2 over DTensor TP, or ZeRO-k over AutoTP.
    """
    base, sep, t = strategy.rpartition("+tp")
    if not sep or not t.isdigit() or int(t) < 2 or base not in TP_BASES:
        return None
    return base, int(t)


def degrees(world: int, tensor: int = 1, pipeline: int = 1) -> int:
    """D, the data-parallel degree of `world` ranks split T x P x D; BadInput when T x P does not divide it."""
    if world % (tensor * pipeline):
        which = "--tensor-parallel" if tensor > 1 else "--pipeline-stages"
        raise BadInput(f"{which}: {tensor * pipeline} rank(s) per replica (T {tensor} x P {pipeline}) do not "
                       f"divide {world} rank(s)")
    return world // (tensor * pipeline)


def data_rank(rank: int, world: int, tensor: int = 1, pipeline: int = 1) -> tuple[int, int]:
    """(this rank's data-parallel index, D): the ranks of one replica (its TP group, or its pipeline stages)
    read the same batches. TP: rank = d T + t; pipeline (DeepSpeed's topology): rank = stage D + d."""
    d = degrees(world, tensor, pipeline)
    return (rank // tensor if tensor > 1 else rank % d), d


def rank_hosts(resources: dict[str, list[int]]) -> list[str]:
    """The host of each global rank: node by node in the resources' order, a node's slots consecutively."""
    return [host for host, slots in resources.items() for _ in slots]


def layout(resources: dict[str, list[int]], tensor: int = 1, pipeline: int = 1) -> dict[str, Any]:
    """The T x P x D split of the run's ranks and, for T > 1, which ranks (and hosts) form each group."""
    hosts = rank_hosts(resources)
    world = len(hosts)
    d = degrees(world, tensor, pipeline)
    out: dict[str, Any] = {"tensor_parallel": tensor, "pipeline_stages": pipeline, "data_parallel": d,
                           "split": f"{tensor}x{pipeline}x{d}", "order": "rank = d x T + t (T innermost)"}
    if tensor > 1:
        tp = [list(range(g * tensor, (g + 1) * tensor)) for g in range(d)]
        out["tp_groups"] = tp
        out["dp_groups"] = [list(range(t, world, tensor)) for t in range(tensor)]
        out["tp_group_hosts"] = [sorted({hosts[r] for r in g}) for g in tp]
        out["tp_spans_nodes"] = any(len(h) > 1 for h in out["tp_group_hosts"])
    return out


def check_placement(cfg, resources: dict[str, list[int]]) -> dict[str, Any]:
    """The layout of cfg's ranks; BadInput where T does not divide them or a TP group would cross nodes."""
    lay = layout(resources, cfg.tensor_parallel, cfg.pipeline_stages)
    if cfg.tensor_parallel > 1 and lay["tp_spans_nodes"] and not cfg.tensor_parallel_across_nodes:
        counts = ", ".join(f"{h} {len(s)}" for h, s in resources.items())
        raise BadInput(f"--tensor-parallel: {cfg.tensor_parallel} does not divide every node's ranks ({counts}), so "
                       "a tensor-parallel group would span nodes; --tensor-parallel-across-nodes allows it")
    return lay
