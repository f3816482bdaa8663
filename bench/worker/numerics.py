"""Rank entrypoint of bench validate's numerics check: does this GPU compute what its peers compute, bit for bit?

Started by DeepSpeed's launcher on every selected GPU of every node at once as

    python -u -m bench.worker.numerics --run-dir results/validate-<id>/runs/<run-id>

Each rank is alone (no process group: nothing it does waits on another rank)
and runs, from numerics.json:
  1. a short deterministic training job: a fixed seed, a fixed synthetic batch,
     fp32 with TF32 off, torch.use_deterministic_algorithms, cuDNN's
     deterministic kernels, timm's attention unfused (matmuls and softmax,
     no SDPA kernel), AdamW without foreach; every step's loss kept
     exactly (a float64 of the float32 loss) and a SHA-256 of the parameters
     after the last step. GPUs of one model, driver and software stack must
     agree bit for bit (bench.analysis.numerics compares them);
  2. an exact matmul: integer matrices in [-3, 3] multiplied in fp32, every
     row and column sum of the product checked against the exact sums computed
     on the CPU in float64 (Huang and Abraham's checksums), and the product
     computed twice must be equal: counted as #wrong;
  3. a timed matmul in the dtype the GPU's peak is quoted in (TFLOP/s of the best timed iteration),
     every rank's starting together (a barrier), so each is timed under the same load.
It writes ranks/rank<R>.json; no summary (the launcher side reads every rank's).
Start and end: bench.worker.bootstrap.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys
import time

from bench.core.accel_names import visible_devices
from bench.core.results import write_json_atomic
from bench.core.storage import subdir
from bench.worker.bootstrap import env_local_rank, env_rank, mark_started, progress, rank_main
from bench.worker.position import POSITION

# cuBLAS is deterministic only with a fixed workspace (torch's docs); read when its first handle is made.
CUBLAS_WORKSPACE = ":4096:8"


def _determinism(torch) -> dict:
    """Deterministic fp32 from here on; returns what it changed, for _restore (a rank that trains after the job)."""
    saved = {"deterministic": torch.are_deterministic_algorithms_enabled(),
             "cudnn_benchmark": torch.backends.cudnn.benchmark, "cudnn_deterministic": torch.backends.cudnn.deterministic,
             "matmul_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn_tf32": torch.backends.cudnn.allow_tf32}
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    # TF32 would round the inputs of every fp32 matmul to 10 mantissa bits: still deterministic, but the
    # check is of fp32 arithmetic, and the exact matmul needs exact products.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return saved


def _restore(torch, saved: dict) -> None:
    torch.use_deterministic_algorithms(saved["deterministic"])
    torch.backends.cudnn.benchmark = saved["cudnn_benchmark"]
    torch.backends.cudnn.deterministic = saved["cudnn_deterministic"]
    torch.backends.cuda.matmul.allow_tf32 = saved["matmul_tf32"]
    torch.backends.cudnn.allow_tf32 = saved["cudnn_tf32"]


def _cpu() -> dict[str, str]:
    """The CPU as /proc/cpuinfo names it: model name (on cloud VMs often a generic one), and what tells one
    microarchitecture from another (vendor, family, model, stepping) and which instructions it has."""
    first: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                first[key.strip()] = value.strip()
    except OSError:
        pass
    flags = hashlib.sha256(" ".join(sorted(first.get("flags", "").split())).encode()).hexdigest()[:12]
    return {"device": first.get("model name") or platform.processor() or "cpu",
            "cpu_id": " ".join(first.get(k, "?") for k in ("vendor_id", "cpu family", "model", "stepping")),
            "cpu_flags": flags}


def stack(torch, device) -> dict:
    """What decides the bits: the device model and the software; peers must share all of it."""
    out = {"torch": torch.__version__, "machine": platform.machine()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update(device=torch.cuda.get_device_name(device), capability=f"{props.major}.{props.minor}",
                   cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    else:
        out.update(**_cpu(), cpu_capability=torch.backends.cpu.get_cpu_capability())
    return out


def train_curve(torch, spec: dict, device, on_step) -> tuple[list[float], str]:
    """Losses of the deterministic job, exactly, and the SHA-256 of the parameters after it."""
    import timm
    import torch.nn.functional as F

    from bench.core import models, synthetic
    from bench.worker.data import CIFAR_MEAN, CIFAR_STD, normalise

    from timm.layers import set_fused_attn

    # Attention as explicit matmuls and softmax, not a fused SDPA kernel: its backward on GPUs need not be
    # deterministic (atomics), and the job must give the same bits every time on the same stack. timm reads the
    # setting when a model is made: restored at once, so a model the rank makes after this job is as it was.
    from timm.layers import config as timm_config

    fused = timm_config._USE_FUSED_ATTN
    set_fused_attn(False)
    torch.manual_seed(spec["seed"])
    m = models.resolve_model(spec["model"], None, 10)
    try:
        model = timm.create_model(m.timm_name, pretrained=False, num_classes=10, img_size=m.img_size, **m.kwargs)
    finally:
        timm_config._USE_FUSED_ATTN = fused
    model = model.to(device).train()
    data = synthetic.synthetic(spec["batch"], 10, seed=spec["seed"], split="train")
    mean = torch.tensor(CIFAR_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD, device=device).view(1, 3, 1, 1)
    x = normalise(torch.from_numpy(data.images).to(device), m.img_size, torch.float32, mean, std)
    y = torch.from_numpy(data.labels).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=spec["lr"], foreach=False, fused=False)
    losses = []
    for step in range(spec["steps"]):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().cpu()))
        on_step(step)
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        digest.update(name.encode())
        digest.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return losses, digest.hexdigest()


def exact_matmul(torch, n: int, seed: int, device) -> dict:
    """#wrong of an fp32 product of integer matrices: its row and column sums against exact ones, and a rerun."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-3, 4, (n, n), generator=g, dtype=torch.int64)
    b = torch.randint(-3, 4, (n, n), generator=g, dtype=torch.int64)
    # |entries| <= 9 n < 2**24 for n below 1.8M: every product and sum is exact in float32.
    da, db = a.to(device, torch.float32), b.to(device, torch.float32)
    c = (da @ db).cpu().double()
    again = (da @ db).cpu().double()
    a64, b64 = a.double(), b.double()
    col_want = a64.sum(0) @ b64          # 1^T (A B) = (1^T A) B
    row_want = a64 @ b64.sum(1)          # (A B) 1 = A (B 1)
    wrong = int((c.sum(0) != col_want).sum()) + int((c.sum(1) != row_want).sum())
    return {"n": n, "wrong": wrong, "rerun_equal": bool(torch.equal(c, again)),
            "checked": "row and column sums against exact float64 sums; the product again"}


def matmul_dtype(torch, device) -> str:
    """The dtype a GPU's matmul peak is quoted in: bf16 from Ampere (8.0), fp16 on Volta/Turing tensor cores,
    fp32 before them and on CPUs."""
    if device.type != "cuda":
        return "fp32"
    major = torch.cuda.get_device_properties(device).major
    return "bf16" if major >= 8 else "fp16" if major >= 7 else "fp32"


def timed_matmul(torch, n: int, dtype_name: str, iters: int, device) -> dict:
    if dtype_name == "auto":
        dtype_name = matmul_dtype(torch, device)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for i in range(iters + 3):
        sync()
        t0 = time.perf_counter()
        a @ b
        sync()
        if i >= 3:  # the first three warm caches, clocks and cuBLAS's heuristics
            times.append(time.perf_counter() - t0)
    # The best iteration, as matmul peak finders report it: a healthy unit reaches its speed at least once in
    # `iters` tries, while time-slicing or a neighbour's burst only ever makes an iteration slower.
    best, median = min(times), sorted(times)[len(times) // 2]
    return {"n": n, "dtype": dtype_name, "iters": iters, "times_s": times, "flops_per_s": 2 * n ** 3 / best,
            "median_flops_per_s": 2 * n ** 3 / median, "figure": "the best of the timed iterations"}


def measure(torch, run_dir: str, rank: int, spec: dict, barrier: dict | None, device, local: int) -> dict:
    """The job on this rank's device: the deterministic curve, the exact matmul, then (all ranks together behind
    `barrier`) the timed matmul; determinism and TF32 as they were afterwards. The rank's report (not written)."""
    mark_started(run_dir, rank)
    saved = _determinism(torch)
    total = spec["steps"] + 2

    def on_step(step: int) -> None:  # every rank reports: the watchdog sees progress while any rank makes it
        POSITION.begin_step()  # a failure from here on was measured (bench.jobs: "measured")
        progress(run_dir, {"step": step + 1, "total": total, "loss": 0.0, "time": time.time()})

    try:
        losses, digest = train_curve(torch, spec, device, on_step)
        exact = exact_matmul(torch, spec["matmul_check_n"], spec["seed"], device)
        on_step(spec["steps"])
        if barrier:
            from bench.worker.barrier import wait
            print(f"matmul barrier: waited {wait(barrier, rank, per_rank=True):.2f} s", flush=True)
        timed = timed_matmul(torch, spec["matmul_n"], spec["matmul_dtype"], spec["matmul_iters"], device)
    finally:
        _restore(torch, saved)
    return {"rank": rank, "local_rank": local, "host": socket.gethostname(), "pid": os.getpid(), "status": "ok",
            "device_index": device.index, "stack": stack(torch, device), "losses": losses, "params_sha256": digest,
            "matmul_exact": exact, "matmul": timed, "cuda_visible_devices": visible_devices(os.environ)}


def first(run_dir: str, rank: int, plan: dict, device, local: int) -> dict:
    """The job run first by a rank that then trains alone or measures links (plan.json "numerics": {"spec",
    "barrier"}): bench validate's per-GPU checks share one launch, and the prolog's numerics its all-reduce's.
    Its report is numerics/rank<R>.json. Call it before the rank's first CUDA matmul (see run: the cuBLAS
    workspace is read once)."""
    import torch

    job = plan["numerics"]
    rec = measure(torch, run_dir, rank, job["spec"], job.get("barrier"), device, local)
    write_json_atomic(os.path.join(subdir(run_dir, "numerics"), f"rank{rank}.json"), rec)
    print(f"numerics: loss {rec['losses'][0]:.6f} -> {rec['losses'][-1]:.6f}, {rec['matmul_exact']['wrong']} wrong, "
          f"matmul {rec['matmul']['flops_per_s'] / 1e12:.3g} TFLOP/s", flush=True)
    return rec


def _device(torch, plan: dict, rank: int, local: int):
    """This rank's device: on CUDA the GPU of its slot or local rank (bench.core.placement), made current."""
    if plan["device"] != "cuda":
        return torch.device("cpu")
    from bench.core.placement import gpu_index
    device = torch.device("cuda", gpu_index(plan, rank, local, torch.cuda.device_count()))
    torch.cuda.set_device(device)
    return device


def run(run_dir: str, rank: int) -> dict:
    # Before torch starts CUDA: cuBLAS is deterministic only with a fixed workspace (torch's docs).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    import torch

    with open(os.path.join(run_dir, "numerics.json")) as f:
        spec = json.load(f)
    with open(os.path.join(run_dir, "plan.json")) as f:
        plan = json.load(f)
    local = env_local_rank()
    device = _device(torch, plan, rank, local)
    rec = measure(torch, run_dir, rank, spec, plan.get("start_barrier"), device, local)
    write_json_atomic(os.path.join(run_dir, "ranks", f"rank{rank}.json"), rec)
    return rec


def before_group(run_dir: str, plan: dict) -> None:
    """bench validate's numerics job on this rank's GPU before its group exists (the prolog: one launch for the
    numerics and the node's all-reduce). No rank waits on another in it but at its matmul's barrier."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)  # before torch starts CUDA, as in run()
    import torch

    rank, local = env_rank(), env_local_rank()
    first(run_dir, rank, plan, _device(torch, plan, rank, local), local)


def main(argv: list[str] | None = None) -> int:
    def one(run_dir: str, rank: int) -> str:
        rec = run(run_dir, rank)
        bad = rec["matmul_exact"]["wrong"] or not rec["matmul_exact"]["rerun_equal"]
        return f"{'broken' if bad else 'OK'}: loss {rec['losses'][0]:.6f} -> {rec['losses'][-1]:.6f}, " \
               f"matmul {rec['matmul']['flops_per_s'] / 1e12:.3g} TFLOP/s, {rec['matmul_exact']['wrong']} wrong"
    return rank_main("bench.worker.numerics", one, argv)


if __name__ == "__main__":
    sys.exit(main())
