"""The typed, validated configuration of one run.

One frozen dataclass, RunConfig, is the single source of truth: the CLI
options of `bench run` are generated from its fields (bench.core.options),
it is validated on construction (bad values raise BadInput naming the
option), written whole as JSON into the run directory for the ranks to
read, and copied whole into every result record.

LaunchConfig holds the fields of where and how ranks start (ranks per node,
launcher, container, rendezvous, device, run directory, timeout); RunConfig
and bench comm's CommConfig both extend it, so the two commands share one
definition and one validation of those options.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from typing import Any

from bench.core.containerspec import check_text as check_container_exec
from bench.core.errors import BadInput
from bench.core.models import PRESETS, resolve_model
from bench.core.options import opt, option_name, seconds
from bench.core.parallel import check_config as check_parallel
from bench.core.precision import PRECISIONS
from bench.core.site import CONTAINER_EXEC_HELP

DATASETS = ("cifar10", "cifar100", "synthetic")
# The launcher names; their classes are bench.launch's registry (a test keeps the two equal).
LAUNCHERS = ("local", "pdsh", "openmpi", "slurm")
SCHEDULES = ("constant", "cosine")
DATA_PATHS = ("device", "dataloader")
ENGINES = ("deepspeed", "ddp", "fsdp2")
OFFLOADS = ("cpu", "nvme")
ADAMW_IMPLS = ("fused", "foreach", "forloop")


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchConfig:
    """Where and how the ranks start: the options bench run and bench comm share."""

    gpus: int | None = opt("ranks per node: with --hostfile, the first N slots of every host (default: every GPU or "
                           "slot; 2 on a CPU-only node)", default=None, metavar="N", aliases=("--num-gpus",))
    launcher: str | None = opt("pdsh (default with several hosts), openmpi, slurm; local for one node",
                               default=None, choices=LAUNCHERS)
    container_exec: str | None = opt(CONTAINER_EXEC_HELP, default=None)
    master_addr: str | None = opt("rendezvous address (default: the first host)", default=None)
    master_port: int | None = opt("rendezvous port (default: a free one)", default=None)
    device: str = opt("auto (cuda when a GPU is visible, else cpu), cuda or cpu", default="auto",
                      choices=("auto", "cuda", "cpu"))
    strict: bool = opt("refuse to launch on a heterogeneous cluster", default=False)
    out: str = opt("results root; each run writes OUT/<run-id>/ (sweep: OUT/<name>/, tune: OUT/tune/)",
                   default="results")
    timeout: float = opt("seconds (or 90s, 5m) without progress before the run is declared hung", default=300.0,
                         parse=seconds, metavar="S")

    def __post_init__(self) -> None:
        validate_launch(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any):
        return dataclasses.replace(self, **changes)


def validate_launch(c: LaunchConfig) -> None:
    """The checks of LaunchConfig's fields, for it and every config that extends it."""
    for f in dataclasses.fields(c):
        value = getattr(c, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise BadInput(f"{option_name(f.name)}: must be a finite number, got {value}")
    if c.launcher is not None and c.launcher not in LAUNCHERS:
        raise BadInput(f"--launcher: must be one of {', '.join(LAUNCHERS)}, got {c.launcher!r}")
    if c.device not in ("auto", "cuda", "cpu"):
        raise BadInput(f"--device: must be one of auto, cuda, cpu, got {c.device!r}")
    if c.gpus is not None and c.gpus <= 0:
        raise BadInput(f"--gpus: must be > 0, got {c.gpus}")
    if c.master_port is not None and not 0 < c.master_port < 65536:
        raise BadInput(f"--master-port: must be a TCP port, got {c.master_port}")
    if not c.timeout > 0:
        raise BadInput(f"--timeout: must be > 0, got {c.timeout}")
    check_container_exec(c.container_exec)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig(LaunchConfig):
    # --- model and data -------------------------------------------------
    model: str = opt("timm model or preset: " + ", ".join(PRESETS), default="vit-tiny-p4-32")
    img_size: int | None = opt("input resolution (default: the preset's, 32 for CIFAR-native)", default=None)
    dataset: str = opt("data set", default="cifar10", choices=DATASETS)
    data_dir: str = opt("CIFAR root holding cifar-10-batches-py / cifar-100-python", default="data")
    download: bool = opt("download CIFAR into --data-dir where the network allows", default=False)
    dataset_fraction: float = opt("share of the training set to use (the study's weak scaling)", default=1.0)
    synthetic_size: int = opt("training images of --dataset synthetic", default=10000)
    data_path: str = opt("batches from device-resident uint8 shards, or a torch DataLoader", default="device",
                         choices=DATA_PATHS)
    eval: bool = opt("measure test-set accuracy at the end", default=True)
    # --- schedule ---------------------------------------------------------
    steps: int | None = opt("optimizer steps to run (default 50 when --epochs is not given)", default=None)
    epochs: float | None = opt("epochs to run instead of --steps", default=None)
    timing_warmup: int = opt("first steps excluded from throughput (reported apart)", default=5)
    micro_batch: int = opt("micro batch per GPU (rank)", default=32)
    grad_accum: int = opt("gradient accumulation steps", default=1)
    lr: float = opt("AdamW learning rate (the study: 1e-4)", default=1e-4)
    weight_decay: float = opt("AdamW weight decay", default=0.05)
    warmup_steps: int = opt("learning-rate warm-up steps", default=0)
    schedule: str = opt("learning-rate schedule after warm-up", default="constant", choices=SCHEDULES)
    seed: int = opt("random seed (data order, augmentation, init)", default=0)
    # --- DeepSpeed --------------------------------------------------------
    engine: str = opt("training engine: DeepSpeed, plain PyTorch DDP (the baseline DeepSpeed is judged against), "
                      "or PyTorch FSDP2 (fully_shard per transformer block)", default="deepspeed", choices=ENGINES)
    zero_stage: int = opt("ZeRO stage", default=0, choices=(0, 1, 2, 3))
    offload: str | None = opt("offload to cpu (optimizer states, ZeRO 1-3; --offload alone) or nvme (ZeRO-Infinity: "
                              "optimizer states and parameters swapped to files under --nvme-path; ZeRO-3)",
                              default=None, choices=OFFLOADS, const="cpu")
    nvme_path: str | None = opt("--offload nvme (and the zero/memory suites' NVMe points): a directory on each "
                                "node's local NVMe for the swap files", default=None)
    pipeline_stages: int = opt("DeepSpeed pipeline stages (PipelineModule: embedding, blocks, head); the ranks "
                               "left over are data parallel; ZeRO 0-1 only", default=1)
    tensor_parallel: int = opt("tensor-parallel degree T: each block's qkv and fc1 split by columns, proj and fc2 by "
                               "rows over T consecutive ranks (whole heads per rank); the ranks left over are data "
                               "parallel. --engine fsdp2: torch DTensor on a 2D mesh, FSDP2 over the data-parallel "
                               "dimension; --engine deepspeed: DeepSpeed's AutoTP with ZeRO 0-3", default=1)
    tensor_parallel_across_nodes: bool = opt("let a tensor-parallel group span nodes (default: refused unless T "
                                             "divides every node's ranks)", default=False)
    reshard_after_forward: bool = opt("fsdp2: free each block's gathered parameters after forward and gather them "
                                      "again in backward (ZeRO-3-like); --no-reshard-after-forward keeps them "
                                      "(ZeRO-2-like)", default=True)
    precision: str = opt("training precision", default="fp32", choices=PRECISIONS)
    overlap_comm: bool | None = opt("overlap gradient reduction with backward (ZeRO 1-3; default DeepSpeed's: "
                                    "off at stages 1-2, on at stage 3)", default=None)
    bucket_size: int | None = opt("reduce/allgather bucket size in elements (default: DeepSpeed's)", default=None)
    breakdown: bool = opt("DeepSpeed's wall-clock breakdown timers, printed into the rank logs (bench's figures "
                          "count communication themselves and do not read them)", default=False)
    deepspeed_config: str | None = opt("user DeepSpeed JSON merged over the generated one", default=None)
    compile: bool = opt("torch.compile the model", default=False)
    channels_last: bool = opt("channels-last memory format for the input", default=False)
    activation_checkpointing: bool = opt("recompute block activations in backward", default=False)
    adamw: str = opt("torch AdamW implementation: fused (one kernel per step, CUDA and CPU), foreach, forloop",
                     default="fused", choices=ADAMW_IMPLS)
    # --- hangs --------------------------------------------------------------
    collective_timeout: float | None = opt(
        "seconds a rank waits in one collective before it fails. Default on CPU (gloo): --timeout, at least 30, "
        "bench's watchdog 15 s past it, so the ranks' own timeouts report first. Default on GPUs (NCCL, whose "
        "watchdog aborts a rank instead of reporting): bench's wait for the first step + 60 s, so bench's watchdog "
        "fires first and asks every rank for its stack and flight record. Given shorter on GPUs, NCCL aborts the "
        "ranks and bench names the culprit from their logs and dumps", default=None, parse=seconds, metavar="S")

    def __post_init__(self) -> None:
        validate_launch(self)
        _validate(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        if isinstance(d.get("offload"), bool):  # records written before --offload nvme: true meant cpu
            d = {**d, "offload": "cpu" if d["offload"] else None}
        unknown = sorted(set(d) - names)
        if unknown:
            raise BadInput(f"config: unknown key(s) {', '.join(unknown)}")
        return cls(**d)

    @classmethod
    def load(cls, path: str) -> "RunConfig":
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def with_absolute_paths(self) -> "RunConfig":
        """The paths the ranks read (--data-dir, --deepspeed-config, --nvme-path) made absolute here.

        Ranks start in their run directory, not where bench was started: a
        relative path would be looked up there.
        """
        def absolute(path: str | None) -> str | None:
            return None if path is None else os.path.abspath(path)

        return self.replace(data_dir=absolute(self.data_dir), deepspeed_config=absolute(self.deepspeed_config),
                            nvme_path=absolute(self.nvme_path))


def _validate(c: RunConfig) -> None:
    """Every check of a RunConfig, by concern; the first that fails raises BadInput naming the option."""
    def bad(name: str, why: str) -> BadInput:
        return BadInput(f"{option_name(name)}: {why}")

    _check_model_and_data(c, bad)
    _check_schedule(c, bad)
    _check_strategy(c, bad)
    check_parallel(c, bad)
    if c.engine in ("ddp", "fsdp2"):
        _check_torch_engine(c, bad)
    if c.bucket_size is not None and c.bucket_size <= 0:
        raise bad("bucket_size", f"must be > 0, got {c.bucket_size}")
    if c.deepspeed_config is not None and not os.path.isfile(c.deepspeed_config):
        raise bad("deepspeed_config", f"no such file {c.deepspeed_config!r}")


def _check_model_and_data(c: RunConfig, bad) -> None:
    try:
        resolve_model(c.model, c.img_size, 10)
    except KeyError as e:
        raise bad("model", str(e.args[0])) from None
    if c.img_size is not None and c.img_size <= 0:
        raise bad("img_size", f"must be > 0, got {c.img_size}")
    for name in ("dataset", "precision", "schedule", "data_path", "engine", "adamw"):
        choices = _field(name).metadata["choices"]
        if getattr(c, name) not in choices:
            raise bad(name, f"must be one of {', '.join(choices)}, got {getattr(c, name)!r}")
    for name in ("micro_batch", "grad_accum", "synthetic_size"):
        if getattr(c, name) <= 0:
            raise bad(name, f"must be > 0, got {getattr(c, name)}")
    if not 0.0 < c.dataset_fraction <= 1.0:
        raise bad("dataset_fraction", f"must be in (0, 1], got {c.dataset_fraction}")


def _check_schedule(c: RunConfig, bad) -> None:
    """How long the run is, what of it is timed, and the optimizer's numbers."""
    if c.steps is not None and c.epochs is not None:
        raise bad("steps", "give --steps or --epochs, not both")
    if c.steps is not None and c.steps <= 0:
        raise bad("steps", f"must be > 0, got {c.steps}")
    if c.epochs is not None and not c.epochs > 0:
        raise bad("epochs", f"must be > 0, got {c.epochs}")
    if c.collective_timeout is not None and not c.collective_timeout > 0:
        raise bad("collective_timeout", f"must be > 0, got {c.collective_timeout}")
    if c.timing_warmup < 0:
        raise bad("timing_warmup", f"must be >= 0, got {c.timing_warmup}")
    if c.steps is not None and c.timing_warmup >= c.steps:
        raise bad("timing_warmup", f"{c.timing_warmup} warm-up steps leave nothing to time in --steps {c.steps}")
    if not c.lr > 0:
        raise bad("lr", f"must be > 0, got {c.lr}")
    if c.weight_decay < 0:
        raise bad("weight_decay", f"must be >= 0, got {c.weight_decay}")
    if c.warmup_steps < 0:
        raise bad("warmup_steps", f"must be >= 0, got {c.warmup_steps}")


def _check_strategy(c: RunConfig, bad) -> None:
    """ZeRO stage, offload and pipeline stages: what DeepSpeed can run together."""
    if c.zero_stage not in (0, 1, 2, 3):
        raise bad("zero_stage", f"must be 0, 1, 2 or 3, got {c.zero_stage}")
    if c.offload is not None and c.offload not in OFFLOADS:
        raise bad("offload", f"must be one of {', '.join(OFFLOADS)}, got {c.offload!r}")
    if c.offload and c.zero_stage < 1:
        raise bad("offload", "optimizer offload needs ZeRO stage 1, 2 or 3, got stage 0")
    if c.offload == "nvme" and c.zero_stage != 3:
        raise bad("offload", f"nvme (ZeRO-Infinity) needs --zero-stage 3, got {c.zero_stage}: DeepSpeed swaps to "
                  "NVMe only at stage 3")
    if c.offload == "nvme" and not c.nvme_path:
        raise bad("nvme_path", "--offload nvme needs --nvme-path DIR (a directory on each node's local disk)")
    if c.pipeline_stages < 1:
        raise bad("pipeline_stages", f"must be >= 1, got {c.pipeline_stages}")
    if c.pipeline_stages > 1:
        if c.engine != "deepspeed":
            raise bad("pipeline_stages", f"pipeline stages are DeepSpeed's PipelineModule, not --engine {c.engine}")
        if c.zero_stage > 1:
            raise bad("pipeline_stages", f"DeepSpeed's pipeline engine supports ZeRO 0-1, got --zero-stage "
                      f"{c.zero_stage}")
        if c.offload:
            raise bad("pipeline_stages", "bench runs pipeline stages without --offload")
        if c.compile or c.activation_checkpointing:
            raise bad("pipeline_stages", "bench's pipeline stages run without --compile and "
                      "--activation-checkpointing")


def _check_torch_engine(c: RunConfig, bad) -> None:
    # DDP and FSDP2 are plain PyTorch + AdamW: anything DeepSpeed-only would make
    # the comparison unfair or be silently ignored, so it is refused.
    e = c.engine
    if c.zero_stage != 0 or c.offload:
        raise bad("engine", f"{e} has no ZeRO: use --zero-stage 0 without --offload")
    allowed = ("fp32",) if e == "ddp" else ("fp32", "bf16")
    if c.precision not in allowed:
        raise bad("engine", f"{e} runs {' or '.join(allowed)}, got --precision {c.precision}")
    if c.deepspeed_config is not None:
        raise bad("engine", f"{e} does not read --deepspeed-config")
    if c.schedule != "constant" or c.warmup_steps:
        raise bad("engine", f"{e} runs a constant learning rate (no --warmup-steps, --schedule constant)")


def _field(name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(RunConfig) if f.name == name)
