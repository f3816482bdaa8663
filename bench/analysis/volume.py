"""What data-parallel strategies must move and hold, analytically: the formulas beside the measured figures.

    analytic_comm_bytes(params=86e6, bytes_per_element=4, n=8, strategy="zero3")   # 3 x Psi x b x (n-1)/n
    model_state_formula(params=86e6, n=8, stage=2, precision="bf16")               # per category, bytes per rank

Both follow the ZeRO paper (Rajbhandari et al., SC'20, sections 5 and 7) for
Psi parameters, b bytes per element of the communicated or stored dtype and
n data-parallel ranks (docs/metrics.md, "Communication per step" and "Model
states per rank"). Tensor parallelism adds Megatron's activation traffic
(tensor_parallel_comm_bytes), and its ranks hold Psi_T = split / T + whole,
over which the data-parallel formulas then apply. Pure Python.
"""

from __future__ import annotations


def _comm_factor(strategy: str, accum: int) -> tuple[float, str]:
    """(k, formula) with volume = k Psi b (n-1)/n per optimizer step of `accum` micro steps.

    DDP and ZeRO 0-1 reduce once per optimizer step (DDP's no_sync, ZeRO's
    boundary): a reduce-scatter and an all-gather, 2 Psi. ZeRO-2 reduces its
    gradient partitions at every micro step and all-gathers the updated
    parameters once: (m + 1) Psi. ZeRO-3 all-gathers the parameters in forward
    and again in backward and reduce-scatters the gradients, every micro step: 3 m Psi.
    """
    if strategy in ("ddp", "zero0", "zero1"):
        return 2.0, "2 Psi b (n-1)/n"
    if strategy == "zero2":
        return accum + 1.0, "(m+1) Psi b (n-1)/n" if accum > 1 else "2 Psi b (n-1)/n"
    if strategy == "zero3":
        return 3.0 * accum, "3 m Psi b (n-1)/n" if accum > 1 else "3 Psi b (n-1)/n"
    # FSDP2 all-gathers each unit's parameters in every micro step's forward (and, resharded after forward, again
    # in its backward) and reduce-scatters the gradients once, at the accumulation boundary.
    if strategy == "fsdp2":
        return 2.0 * accum + 1, "(2m+1) Psi b (n-1)/n" if accum > 1 else "3 Psi b (n-1)/n"
    if strategy == "fsdp2-keep":
        return accum + 1.0, "(m+1) Psi b (n-1)/n" if accum > 1 else "2 Psi b (n-1)/n"
    raise ValueError(f"strategy: unknown {strategy!r}")


PIPELINE_COMM = ("pipeline stages: each sends its activations forward and their gradients back (point to point) and "
                 "all-reduces its own gradients over its data-parallel ranks; no single-Psi formula")


def strategy_of(engine: str, zero_stage: int, *, reshard_after_forward: bool = True, pipeline_stages: int = 1) -> str:
    """'ddp', 'zero<stage>', 'fsdp2' (resharded after forward), 'fsdp2-keep' or 'pipeline': the formulas' key."""
    if pipeline_stages > 1:
        return "pipeline"
    if engine == "fsdp2":
        return "fsdp2" if reshard_after_forward else "fsdp2-keep"
    return "ddp" if engine == "ddp" else f"zero{zero_stage}"


def tensor_parallel_comm_bytes(*, depth: int, micro_batch: int, tokens: int, width: int, tensor: int,
                               bytes_per_element: float, accum: int = 1, recompute: bool = False) -> float:
    """Megatron's activation traffic of tensor parallelism: bytes one rank sends per optimizer step.

    Per block and micro batch, two all-reduces in forward (the outputs of the row-split proj and fc2) and
    two in backward (the gradients of the column-split qkv's and fc1's inputs), each of the activations,
    B x N x D elements of b bytes. With activation checkpointing the block's forward runs again in backward,
    but torch's (non-reentrant) checkpoint stops once the tensors backward needs are back: fc2's output and
    its all-reduce are not recomputed, proj's is (Megatron's full recomputation counts both: 6). Each
    all-reduce sends 2(T-1)/T of its buffer (the ring's, gloo's too: bench.core.collectives.SENT):

        k L m B N D b 2(T-1)/T        k = 4 (5 with checkpointing), L blocks, m micro batches per step

    (Shoeybi et al., Megatron-LM, 2019, section 3; Korthikanti et al., 2022, section 4.)
    """
    if tensor < 1 or min(depth, micro_batch, tokens, width, accum) < 1 or bytes_per_element <= 0:
        raise ValueError(f"need T, L, B, N, D, m >= 1 and b > 0; got T={tensor}, L={depth}, B={micro_batch}, "
                         f"N={tokens}, D={width}, m={accum}, b={bytes_per_element}")
    k = 5 if recompute else 4
    return k * depth * accum * micro_batch * tokens * width * bytes_per_element * 2 * (tensor - 1) / tensor


def tensor_parallel_formula(recompute: bool = False) -> str:
    return f"{5 if recompute else 4} L m B N D b 2(T-1)/T"


def tensor_parallel_local_params(split: float, replicated: float, tensor: int) -> float:
    """Psi_T, the parameters one rank of a TP group holds: the split layers' 1/T and everything kept whole.
    The data-parallel formulas (communication, model states) apply to Psi_T over the D data-parallel ranks."""
    return split / tensor + replicated


def comm_bytes_per_element(precision: str, communication_data_type: str | None = None) -> int:
    """b of the gradients on the wire: DeepSpeed's communication_data_type when set, else the training dtype."""
    dtype = communication_data_type or precision
    return {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2}[dtype]


def analytic_comm_bytes(params: float, bytes_per_element: float, n: int, strategy: str, accum: int = 1,
                        reduce_bytes_per_element: float | None = None) -> float:
    """Bytes one rank sends per optimizer step: k x Psi x b x (n-1)/n (k: _comm_factor).

    reduce_bytes_per_element: FSDP2's gradient reduce-scatter when it differs from the gathers' b (bf16
    parameters, fp32 reduction): the one reduction of the k is then counted at that width.
    """
    if n < 1 or params < 0 or bytes_per_element <= 0 or accum < 1:
        raise ValueError(f"need n >= 1, params >= 0, bytes > 0, accum >= 1; got {n}, {params}, "
                         f"{bytes_per_element}, {accum}")
    k = _comm_factor(strategy, accum)[0]
    if reduce_bytes_per_element is not None and strategy.startswith("fsdp2"):
        return ((k - 1) * bytes_per_element + reduce_bytes_per_element) * params * (n - 1) / n
    return k * params * bytes_per_element * (n - 1) / n


def analytic_formula(strategy: str, accum: int = 1) -> str:
    return _comm_factor(strategy, accum)[1]


def sharded_stage(strategy: str) -> int | None:
    """The ZeRO stage whose model states a strategy holds at rest (None: no formula, the pipeline's)."""
    if strategy in ("ddp", "zero0"):
        return 0
    if strategy.startswith("zero"):
        return int(strategy[4:])
    if strategy in ("fsdp2", "fsdp2-keep"):
        return 3  # parameters, gradients and optimizer states all sharded between steps, resharded or not
    return None


def model_state_formula(params: float, n: int, stage: int, precision: str) -> dict[str, float]:
    """The ZeRO paper's model states per rank, by category, in bytes.

    b = 2 for fp16/bf16 weights and gradients, 4 for fp32. Adam keeps two fp32
    moments (8 Psi); mixed precision adds an fp32 master copy (4 Psi: the
    paper's K = 12), fp32 training needs none (K = 8). ZeRO partitions over
    n ranks: stage 1 the optimizer states (master included), stage 2 also the
    gradients, stage 3 also the parameters. DDP is stage 0.
    """
    b = 2 if precision in ("fp16", "bf16") else 4
    part = {1: n if stage >= 1 else 1, 2: n if stage >= 2 else 1, 3: n if stage >= 3 else 1}
    out = {"params": b * params / part[3], "grads": b * params / part[2],
           "master_params": (4 * params if b == 2 else 0.0) / part[1],
           "optimizer_states": 8 * params / part[1]}
    out["total"] = sum(out.values())
    return out
