# The sections of benchmarks/gpu-check.sh, sourced by it: one function a section, each run under its budget.
#
#   source benchmarks/gpu-check-sections.sh && setup && sec_copies     # what gpu-check.sh runs for `copies`
#
# Each section reads OUT, PY, DRY, GPU (exported by gpu-check.sh), writes under $OUT and ends with its own
# summary (its checks: [ok], [WRONG], or [-] where a CPU dry run cannot tell). Not a script of its own.

setup() {
if [[ $DRY == 1 ]]; then
  # CPU, tiny: checks the commands, the records and the table, not the GPU.
  DEV=(--device cpu --gpus 1)
  TDEV=(--device cpu)
  PREC=fp32
  STEPS=(--steps 6 --timing-warmup 2)
  TSTEPS=(--steps 3 --warmup 1)
  CASES=("vit-micro-p4-32 vit_tiny_patch16_224 32 4 8 96 4 3"
         "vit-micro-p4-32 vit_tiny_patch16_224 32 4 8 96 4 3")
  export OMP_NUM_THREADS=1
else
  DEV=(--device cuda --gpus 1)
  TDEV=(--device cuda)
  PREC=bf16
  STEPS=(--steps 40 --timing-warmup 10)
  TSTEPS=(--steps 30 --warmup 10)
  # preset timm_name img patch batch [embed depth heads]
  CASES=("vit-b16-224 vit_base_patch16_224 224 16 256"
         "vit-tiny-p4-32 vit_tiny_patch16_224 32 4 256")
  export CUDA_VISIBLE_DEVICES=$GPU CUDA_DEVICE_ORDER=PCI_BUS_ID
fi
mkdir -p "$OUT"
echo "localhost slots=1" > "$OUT/validate-hostfile"   # this node alone, its first slot (validate picks GPUs by slot)
}


# --- check: the driver, torch's CUDA, and whether they can work together ---------------------------------------
# CUDA's minor version compatibility (https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html,
# Table 1): a CUDA 13.x build needs a driver >= 580, 12.x >= 525, 11.x >= 450. torch 2.14.1+cu130 (the default
# image's) on a 535-570 driver: torch.cuda.is_available() is False and every section after would fail without
# saying why; the Pascal image's torch 2.7.1+cu126 runs on 525 and later.
sec_check() {
if [[ $DRY == 1 ]]; then
  echo "   dry run on CPU: no driver; $($PY -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo "no torch in $PY")"
  return 0
fi
command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi here: no NVIDIA driver (use --dry-run on CPU)" >&2; return 2; }
local driver
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
[[ -n "$driver" ]] || { echo "gpu-check: nvidia-smi names no driver version: $(nvidia-smi -L 2>&1 | head -1)" >&2; return 2; }
$PY - "$driver" <<'EOFCHECK'
import sys
driver = sys.argv[1]
try:
    import torch
except ImportError as e:
    sys.exit(print(f"gpu-check: driver {driver}, but {sys.executable} has no torch ({e})", file=sys.stderr) or 2)
cuda = torch.version.cuda
NEEDS = {13: 580, 12: 525, 11: 450}   # CUDA major -> the least driver (NVIDIA's minor version compatibility table)
where = "docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"
if cuda is None:
    sys.exit(print(f"gpu-check: driver {driver}, but torch {torch.__version__} is a CPU build (no CUDA)",
                   file=sys.stderr) or 2)
need = NEEDS.get(int(cuda.split(".")[0]))
major = int(driver.split(".")[0]) if driver.split(".")[0].isdigit() else 0
if need is not None and major < need:
    sys.exit(print(f"gpu-check: driver {driver} cannot run torch {torch.__version__} (CUDA {cuda} needs a driver >= "
                   f"{need}: {where}): install a {need}+ driver or use an image built for CUDA "
                   f"{'12.x (docker/build.sh --variant pascal: torch 2.7.1+cu126, driver >= 525)' if need > 525 else 'of this driver'}",
                   file=sys.stderr) or 2)
if not torch.cuda.is_available():
    sys.exit(print(f"gpu-check: driver {driver} and torch {torch.__version__} (CUDA {cuda}) can work together, but torch "
                   "sees no GPU (torch.cuda.is_available() is False: CUDA_VISIBLE_DEVICES, the container's --gpus, "
                   "the device files)", file=sys.stderr) or 2)
print(f"   driver {driver}, torch {torch.__version__} with CUDA {cuda} (needs a driver >= {need}: {where}): they work "
      f"together; GPU {torch.cuda.get_device_name(0)}")
EOFCHECK
}

# --- copies (issues 41, 48): a GPU's copies to and from its host and within its memory, beside nvbandwidth -----
# bench validate --checks copies,memory on this node's first slot: H2D, D2H and both at once from pinned memory,
# a D2D copy within the GPU (read and write counted), alone (the median of 10) and all at once (each kind behind
# its own barrier over a 1 s window; one GPU: itself), its link (the least of every link up to its root port,
# maximum and trained), its pinned buffers freed where torch can. Beside it, where installed, nvbandwidth's CE
# copies (host_to_device_memcpy_ce, device_to_host_memcpy_ce, the two bidirectional ones (summed: bench's
# "both"), device_local_copy: counted once, doubled here) read by bench's own nvbandwidth reader, 60 s at most.
sec_copies() {
$PY -m bench validate --hostfile "$OUT/validate-hostfile" --level quick --checks copies,memory \
    --out "$OUT/validate-copies" --json > "$OUT/validate-copies.json" 2> "$OUT/validate-copies.err" \
    || echo "   bench validate exited $? (its rows say why)"
if [[ $DRY == 0 ]] && command -v nvbandwidth >/dev/null; then
  timeout 60 nvbandwidth -t host_to_device_memcpy_ce device_to_host_memcpy_ce host_to_device_bidirectional_memcpy_ce \
      device_to_host_bidirectional_memcpy_ce device_local_copy > "$OUT/nvbandwidth.txt" 2>&1 \
      || echo "   nvbandwidth exited $?"
fi
$PY - "$OUT" "$DRY" <<'EOFCOPIES'
import glob, json, os, sys
out, dry = sys.argv[1], sys.argv[2] == "1"
try:
    rec = json.loads(open(f"{out}/validate-copies.json").read().strip().splitlines()[-1])
except (OSError, ValueError, IndexError) as e:
    rec = {}
    print(f"  bench validate gave no record ({e}): {out}/validate-copies.err")
rows = [c for c in rec.get("checks") or [] if c["check"] in ("copies", "memory", "binding")]
for c in rows:
    print(f"  bench {c['check']:<8}{c['node']:<14}{c['status']:<6}{c['value']}")
    print(f"      {c['reason'][:300]}")
ranks = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/validate-copies/*/runs/*/copies/rank*.json"))]
r = ranks[0] if ranks else {}
ours = (r.get("phases") or {}).get("alone") or {}
together = (r.get("phases") or {}).get("together") or {}
theirs = {}
if os.path.exists(f"{out}/nvbandwidth.txt"):
    from bench.cluster.accel.nvidia import nvbandwidth
    nv = nvbandwidth.parse(open(f"{out}/nvbandwidth.txt", errors="replace").read())
    for f in nvbandwidth.figures(nv):
        if f.get("gpu") == 0 and f.get("peer") is None:
            theirs[f["kind"]] = f["gbps"] * (2 if f["kind"] == "local" else 1)
    if "h2d_bidir" in theirs and "d2h_bidir" in theirs:
        theirs["both"] = theirs["h2d_bidir"] + theirs["d2h_bidir"]
print(f"  {'copy':<8}{'alone GB/s':>12}{'all at once':>13}{'nvbandwidth GB/s':>18}")
for ours_kind, their_kind in (("h2d", "h2d"), ("d2h", "d2h"), ("both", "both"), ("host", "-"), ("d2d", "local")):
    a, t, b = ours.get(ours_kind), together.get(ours_kind), theirs.get(their_kind)
    print(f"  {ours_kind:<8}{'-' if a is None else f'{a:.2f}':>12}{'-' if t is None else f'{t:.2f}':>13}"
          f"{'-' if b is None else f'{b:.2f}':>18}")
if not theirs:
    print("  nvbandwidth: " + ("not run in the dry run" if dry else "not installed here"))
b = r.get("binding") or {}
print(f"  link: Gen{b.get('pcie_gen')} x{b.get('pcie_width')} at most, Gen{b.get('pcie_gen_now')} x{b.get('pcie_width_now')} "
      f"after the copies, through {b.get('pcie_path')}" if b.get("bus_id") else "  link: none (a CPU rank)")
print(f"  timed: {(r.get('sizes') or {}).get('timed')}")
gpu = r.get("device") == "cuda"
checks = [("copies and memory rows for the GPU", bool(rows) and {"copies", "memory"} <= {c["check"] for c in rows}),
          (f"all at once, each kind a window of copies: {r.get('together_copies')}",
           None if dry else gpu and all(n >= 3 for n in (r.get("together_copies") or {"-": 0}).values())),
          (f"pinned memory: {r.get('pinned')}", None if dry else bool(r.get("pinned"))),
          ("the link read from sysfs, its maximum and what it trained to",
           None if dry else b.get("pcie_gen") is not None and b.get("pcie_width_now") is not None)]
for what, ok in checks:
    print(f"  [{'-' if ok is None else 'ok' if ok else 'WRONG'}] {what}")
EOFCOPIES
}

# --- burn (issues 41, 48): the GPU hot for $BURN (60 s; the dry run 10 s on one CPU rank), NVML each second ----
# bench validate --checks burn: throughput per second and NVML's SM clock, temperature, power and clocks event
# reasons, each GPU read on its own; its findings, a reasons call NVML does not support (unknown), SW power cap
# said apart ("at its power limit": normal under load) from the throttles.
sec_burn() {
if [[ $DRY == 1 ]]; then BURN=10s; else BURN=${BURN:-60s}; fi
$PY -m bench validate --hostfile "$OUT/validate-hostfile" --level quick --checks burn --burn "$BURN" \
    --out "$OUT/validate-burn" --json > "$OUT/validate-burn.json" 2> "$OUT/validate-burn.err" \
    || echo "   bench validate exited $? (its rows say why)"
$PY - "$OUT" "$DRY" <<'EOFBURN'
import json, sys
sys.path.insert(0, ".")
from bench.analysis.burn import POWER_CAP, THROTTLE
out, dry = sys.argv[1], sys.argv[2] == "1"
try:
    rec = json.loads(open(f"{out}/validate-burn.json").read().strip().splitlines()[-1])
except (OSError, ValueError, IndexError) as e:
    rec = {}
    print(f"  bench validate gave no record ({e}): {out}/validate-burn.err")
rows = [c for c in rec.get("checks") or [] if c["check"] == "burn"]
for c in rows:
    print(f"  bench {c['check']:<8}{c['node']:<14}{c['status']:<6}{c['value']}")
    print(f"      {c['reason'][:300]}")
burn = next(iter((rec.get("measured") or {}).get("burn", {}).values()), {})
nvml = burn.get("nvml") or {}
for bus, cols in nvml.items():
    sm = [x for x in cols.get("sm_mhz") or [] if x is not None]
    temp = [x for x in cols.get("temp_c") or [] if x is not None]
    rs = cols.get("reasons") or []
    read = [x for x in rs if x is not None]
    print(f"  NVML {bus}: SM {min(sm or [0]):.0f}-{max(sm or [0]):.0f} MHz, peak {max(temp or [0]):.0f} C; of {len(rs)} "
          f"samples {sum(1 for x in read if x & THROTTLE)} throttled, {sum(1 for x in read if x & POWER_CAP)} at the power "
          f"limit, {len(rs) - len(read)} with reasons unknown")
for key in ("nvml_findings", "nvml_api", "nvml_died", "nvml_unsupported"):
    if burn.get(key):
        print(f"  {key}: {burn[key]}")
checks = [("a burn row for the GPU and its node", len(rows) >= 2),
          ("the burn said why there is no NVML (CPU)" if dry else "NVML sampled the GPU during the burn",
           (burn.get("nvml") is None and "no NVML here" in str(burn.get("nvml_error"))) if dry else bool(nvml)),
          ("NVML: no finding, no API gap, the sampler alive",
           None if dry else not (burn.get("nvml_findings") or burn.get("nvml_api") or burn.get("nvml_died")))]
for what, ok in checks:
    print(f"  [{'-' if ok is None else 'ok' if ok else 'WRONG'}] {what}")
EOFBURN
}

# --- dcgm: DCGM's own checks beside bench's, where dcgmi is installed: level 1 (60 s at most) and its pcie test
# (90 s at most), not the two 600 s runs of before; their words are printed as DCGM gives them.
sec_dcgm() {
if [[ $DRY == 1 ]] || ! command -v dcgmi >/dev/null; then
  echo "   dcgmi: $([[ $DRY == 1 ]] && echo "not run in the dry run" || echo "not installed here")"
  return 0
fi
timeout 60 dcgmi diag -r 1 -i "$GPU" -j > "$OUT/dcgmi-r1.json" 2> "$OUT/dcgmi-r1.err" || echo "   dcgmi -r 1 exited $?"
timeout 90 dcgmi diag -r pcie -i "$GPU" -j > "$OUT/dcgmi-pcie.json" 2> "$OUT/dcgmi-pcie.err" || echo "   dcgmi -r pcie exited $?"
$PY - "$OUT" <<'EOFDCGM'
import os, re, sys
out = sys.argv[1]
for t in ("r1", "pcie"):
    path = f"{out}/dcgmi-{t}.json"
    text = open(path, errors="replace").read() if os.path.exists(path) else ""
    said = sorted(set(re.findall(r"[^\"]*?\d+(?:\.\d+)? ?(?:GB/s|MB/s|GiB/s)[^\"]*", text)))[:8]
    status = sorted(set(re.findall(r'"(?:status|result)"\s*:\s*"(\w+)"', text)))
    print(f"  dcgmi {t}: {', '.join(status) or 'no status'}")
    for line in said:
        print(f"      {line.strip()[:200]}")
EOFDCGM
}

# --- cases: bench against a bare timm-style loop, ViT-B/16 @224 and a CIFAR-native ViT, bf16 ------------------
sec_cases() {
i=0
for case in "${CASES[@]}"; do
  read -r preset timm_name img patch batch embed depth heads <<<"$case"
  i=$((i + 1))
  echo "## case $i: $preset ($timm_name @ $img, patch $patch), batch $batch, $PREC"
  start=$(date +%s)
  $PY -m bench run --model "$preset" --dataset synthetic --precision "$PREC" --micro-batch "$batch" \
      "${STEPS[@]}" "${DEV[@]}" --no-eval --out "$OUT/bench-$i" --json > "$OUT/bench-$i.json" \
      2> "$OUT/bench-$i.err" || echo "   bench run exited $? (its row says why)"
  extra=()
  [[ -n "${embed:-}" ]] && extra=(--embed-dim "$embed" --depth "$depth" --num-heads "$heads")
  $PY benchmarks/timm_train_bench.py --model "$timm_name" --img-size "$img" --patch-size "$patch" \
      --batch "$batch" --precision "$PREC" "${TSTEPS[@]}" "${TDEV[@]}" "${extra[@]}" > "$OUT/timm-$i.json" \
      2> "$OUT/timm-$i.err" || echo "   timm loop exited $? (its row says why)"
  echo "   took $(( $(date +%s) - start )) s"
done

$PY - "$OUT" "$i" "$GPU" <<'EOF'
import json, sys
out, n, gpu = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def pct(x): return "-" if x is None else f"{x * 100:.1f}%"
def gib(xs): return None if not xs or None in xs else max(xs) / 2**30
def num(x, w): return f"{'-':>{w}}" if x is None else f"{x:>{w}.2f}"
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        tail = open(path.replace(".json", ".err"), errors="replace").read().strip().splitlines()[-1:] or [str(e)]
        return {"status": "failed", "error": {"reason": tail[0][:200]}}
print(f"{'model':<18}{'bench img/s':>12}{'TFLOP/s':>9}{'MFU':>7}{'data':>7}{'alloc GiB':>10}{'resv GiB':>9}"
      f"{'dev GiB':>8}{'timm-eq img/s':>15}{'MFU':>7}{'mem GiB':>9}{'bench/timm-eq':>15}")
checks = []
for i in range(1, n + 1):
    rec, t = load(f"{out}/bench-{i}.json"), load(f"{out}/timm-{i}.json")
    if rec.get("status") != "ok":
        print(f"case {i}: bench run {rec.get('status')}: {(rec.get('error') or {}).get('reason')}")
        continue
    f = rec["figures"]
    mem, resv, dev = gib(f["peak_memory_bytes"]), gib(f.get("peak_reserved_bytes")), gib(f.get("device_used_bytes"))
    if "images_per_s" not in t:
        print(f"{rec['config']['model']:<18}{f['images_per_s']:>12.1f}  timm loop failed: {t['error']['reason']}")
    else:
        tmem = (t["peak_memory_bytes"] or 0) / 2**30
        print(f"{rec['config']['model']:<18}{f['images_per_s']:>12.1f}{f.get('tflops') or 0:>9.2f}{pct(f['mfu']):>7}"
              f"{pct(f['data_share']):>7}{num(mem, 10)}{num(resv, 9)}{num(dev, 8)}{t['images_per_s']:>15.1f}"
              f"{pct(t['mfu']):>7}{tmem:>9.2f}{f['images_per_s'] / t['images_per_s']:>15.3f}")
    if f["mfu"] is None:
        print(f"  no MFU: {f.get('mfu_reason')}")
    if rec["plan"]["device"] != "cuda":
        checks.append((f"case {i}: GPU selection, memory and NCCL checks: not applicable on CPU", None))
        continue
    gpu_seen = (rec["provenance"]["devices"][0].get("gpu") or {})
    checks.append((f"case {i}: the rank ran on the chosen GPU (CUDA_VISIBLE_DEVICES {gpu_seen.get('cuda_visible_devices')}, "
                   f"bus {gpu_seen.get('pci_bus_device')}, order {gpu_seen.get('cuda_device_order')}; "
                   f"timm loop bus {t.get('pci_bus_device')})",
                   gpu_seen.get("cuda_visible_devices") == gpu and gpu_seen.get("cuda_device_order") == "PCI_BUS_ID"
                   and gpu_seen.get("pci_bus_device") is not None and gpu_seen.get("pci_bus_device") == t.get("pci_bus_device")))
    checks.append((f"case {i}: memory: allocated <= reserved <= device used ({num(mem, 0)} / {num(resv, 0)} / {num(dev, 0)} GiB)",
                   None not in (mem, resv, dev) and mem <= resv <= dev))
    checks.append((f"case {i}: communication time null with a reason on a GPU: {f.get('comm_share_reason')!r}",
                   f.get("comm_share") is None and bool(f.get("comm_share_reason"))))
for what, ok in checks:
    print(f"  [{'-' if ok is None else 'ok' if ok else 'WRONG'}] {what}")
EOF
}

# --- Issue 21: what only a GPU proves (items 1, 5, 6, 7); ~2 min on one H200 (not yet run on one) -------------------------
sec_issue21() {
# 1. srun --gpus-per-task=1: the node's second task sees one GPU (cuda:0) with SLURM_LOCALID=1. The case-2
#    run's directory is run again by `python -m bench.worker` with exactly that Slurm environment, once per
#    engine (DeepSpeed, DDP, FSDP2): before issue 21, DeepSpeed's set_device(LOCAL_RANK=1) failed there.
#    (init_process_group's device_id path needs 2+ ranks, which one GPU cannot hold: NCCL refuses two ranks
#    on one GPU; tests/multihost/test_slurm_gpus.py checks the environment of 6 real Slurm tasks.)
# 5. the peak memory is the steady steps' and is read before evaluation: the same run with and without
#    evaluation must report the same peak (within 2%), and the reset happened at --timing-warmup.
# 6. fp16 with a loss scale that overflows at first (initial_scale_power 24): the skipped steps are counted
#    and left out of images/s (steady_steps + skipped_steps = the steady window).
# 7. FSDP2 is built from the CPU model and shards as it moves (the engine-1 rerun trains on the GPU); its
#    memory saving needs 2+ GPUs and is not measurable on one. ZeRO-3 partitions the CPU-built model with
#    deepspeed.zero.Init(module=...) (bench.worker.engines.shard_zero3): a ZeRO-3 run on the GPU must record
#    the partitions made on cuda:0 with NCCL (its saving, too, needs 2+ GPUs).
base=$(ls -d "$OUT"/bench-2/*/ 2>/dev/null | head -1)
SMALL=(--model vit-micro-p4-32 --dataset synthetic --synthetic-size 2048 --steps 12 --timing-warmup 2 "${DEV[@]}")
[[ $DRY == 1 ]] || SMALL=(--model vit-tiny-p4-32 --dataset synthetic --synthetic-size 20480 --micro-batch 256 \
                          --steps 20 --timing-warmup 3 "${DEV[@]}")
$PY -m bench run "${SMALL[@]}" --no-eval --out "$OUT/mem-noeval" --json > "$OUT/mem-noeval.json" 2> "$OUT/mem-noeval.err"
$PY -m bench run "${SMALL[@]}" --out "$OUT/mem-eval" --json > "$OUT/mem-eval.json" 2> "$OUT/mem-eval.err"
if [[ $DRY == 1 ]]; then FP16=(--precision fp32); else FP16=(--precision fp16); fi
echo '{"fp16": {"initial_scale_power": 24}}' > "$OUT/fp16-overflow.json"
$PY -m bench run "${SMALL[@]}" --no-eval "${FP16[@]}" --deepspeed-config "$(cd "$OUT" && pwd)/fp16-overflow.json" \
    --out "$OUT/fp16" --json > "$OUT/fp16.json" 2> "$OUT/fp16.err"
$PY -m bench run "${SMALL[@]}" --no-eval --zero-stage 3 --out "$OUT/zero3" --json > "$OUT/zero3.json" 2> "$OUT/zero3.err"
for engine in deepspeed ddp fsdp2; do
  [[ -n "$base" ]] || break
  d="$OUT/slurm-task1-$engine"
  rm -rf "$d" && mkdir -p "$d" && cp "$base"/{config.json,plan.json,ds_config.json} "$d"/
  # A short rerun of this engine, with no heartbeat to watch (bench is not running it).
  $PY - "$d" "$engine" <<'PY'
import json, sys
d, engine = sys.argv[1], sys.argv[2]
cfg = json.load(open(f"{d}/config.json")); cfg.update(engine=engine, steps=6, timing_warmup=2, eval=False)
json.dump(cfg, open(f"{d}/config.json", "w"))
plan = json.load(open(f"{d}/plan.json")); plan.update(orphan_after_s=0, master_addr="127.0.0.1", master_port=29631)
json.dump(plan, open(f"{d}/plan.json", "w"))
PY
  env -u RANK -u LOCAL_RANK -u WORLD_SIZE SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=1 SLURM_NTASKS_PER_NODE=2 \
      timeout 180 $PY -u -m bench.worker --run-dir "$d" > "$d.out" 2>&1 || echo "   $engine rerun exited $?"
done
$PY - "$OUT" "$DRY" <<'EOF2'
import glob, json, os, sys
out, dry = sys.argv[1], sys.argv[2] == "1"
def rec(name):
    try:
        return json.load(open(f"{out}/{name}.json"))
    except (OSError, ValueError):
        return {"status": "missing"}
def ranks(r):
    return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(r.get("run_dir", "/nonexistent"), "ranks", "rank*.json")))]
checks = []
for engine in ("deepspeed", "ddp", "fsdp2"):
    d = f"{out}/slurm-task1-{engine}"
    try:
        r0 = json.load(open(f"{d}/ranks/rank0.json"))
    except (OSError, ValueError):
        log = open(f"{d}.out", errors="replace").read().strip().splitlines()[-1:] if os.path.exists(f"{d}.out") else ["no rerun"]
        checks.append((f"item 1, {engine}: SLURM_LOCALID=1 with one GPU visible: no rank record ({log[0][:160]})", False))
        continue
    gpu = r0.get("gpu") or {}
    checks.append((f"item 1, {engine}: SLURM_LOCALID=1 with one GPU visible ran on cuda:{gpu.get('index')} "
                   f"({r0.get('status')}, launcher local rank {r0.get('local_rank')})",
                   None if dry else r0.get("status") == "ok" and gpu.get("index") == 0 and r0.get("local_rank") == 1))
noeval, witheval = rec("mem-noeval"), rec("mem-eval")
if noeval.get("status") == witheval.get("status") == "ok":
    a, b = max(noeval["figures"]["peak_memory_bytes"]), max(witheval["figures"]["peak_memory_bytes"])
    rs = ranks(witheval)
    steady = {r.get("steady_from") for r in rs}
    checks.append((f"item 5: peak without evaluation {a / 2**20:.0f} MiB, with {b / 2**20:.0f} MiB; reset at step "
                   f"{sorted(steady)} (--timing-warmup {witheval['config']['timing_warmup']})",
                   None if dry else abs(a - b) <= 0.02 * a and steady == {witheval["config"]["timing_warmup"]}))
else:
    checks.append((f"item 5: runs {noeval.get('status')}/{witheval.get('status')}", False))
fp = rec("fp16")
if fp.get("status") == "ok":
    rs = ranks(fp)
    window = fp["config"]["steps"] - fp["config"]["timing_warmup"]
    sk = [r.get("skipped_steps") for r in rs]
    checks.append((f"item 6: fp16 from loss scale 2^24: skipped {sk} of the {window} steady steps, "
                   f"steady_steps {[r.get('steady_steps') for r in rs]}, {fp['figures']['images_per_s']:.1f} img/s",
                   None if dry else all(s and s > 0 and r["steady_steps"] + s == window for s, r in zip(sk, rs))))
else:
    checks.append((f"item 6: fp16 run {fp.get('status')}: {(fp.get('error') or {}).get('reason')}", False))
checks.append(("item 7: FSDP2's saving needs 2+ GPUs (one GPU holds one NCCL rank); built from the CPU model it "
               "ran above (item 1, fsdp2)", None))
z3 = rec("zero3")
sh = ((z3.get("figures") or {}).get("model_states") or {}).get("sharded_from") or {}
checks.append((f"item 7: ZeRO-3 {z3.get('status')}: partitioned from the CPU-built model, gathered on "
               f"{sh.get('gathered_on')}, partitions on {sh.get('partitions_on')}, {sh.get('backend')}",
               None if dry else z3.get("status") == "ok" and sh.get("gathered_on") == "cuda:0"
               and sh.get("backend") == "nccl" and sh.get("how", "").startswith("deepspeed.zero.Init(module=")))
for what, ok in checks:
    print(f"  [{'-' if ok is None else 'ok' if ok else 'WRONG'}] {what}")
EOF2
}

# --- Issue 25: the numerics job and matmul on CUDA; ~1 min on one H200 --------------------------------------
sec_numerics() {
# bench validate --level prolog twice on this GPU: the first saves the numerics job's curve, the second must
# reproduce it bit for bit (judged "reference"): torch's deterministic settings and the fixed cuBLAS workspace
# hold on this GPU, across processes. The timed bf16 matmul is judged against the best measured figure for
# the GPU (bench/data/reference_throughput.json, matmul) where there is one.
$PY -m bench validate --level prolog --out "$OUT/prolog" --json --save-numerics-reference "$OUT/numerics-ref.json" \
    > "$OUT/prolog-1.json" 2> "$OUT/prolog-1.err"
$PY -m bench validate --level prolog --out "$OUT/prolog" --json --numerics-reference "$OUT/numerics-ref.json" \
    > "$OUT/prolog-2.json" 2> "$OUT/prolog-2.err"
$PY - "$OUT" "$DRY" <<'EOF3'
import json, sys
out, dry = sys.argv[1], sys.argv[2] == "1"
checks = []
try:
    second = json.load(open(f"{out}/prolog-2.json"))
    saved = json.load(open(f"{out}/numerics-ref.json"))
except (OSError, ValueError) as e:
    second, saved = {}, {"curves": []}
    checks.append((f"prolog runs: {e}", False))
nm = (second.get("measured") or {}).get("numerics") or {}
rows = [c for c in second.get("checks", []) if c["check"] in ("numerics", "matmul") and c.get("gpu") is not None]
checks.append((f"numerics: the second run judged by the saved curve ({len(saved['curves'])} saved): "
               f"{sorted({x['judged_by'] for x in nm.values()})}, {[r['status'] for r in rows if r['check'] == 'numerics']}",
               bool(nm) and all(x["judged_by"] == "reference" and x["status"] == "PASS" for x in nm.values())))
for r in rows:
    if r["check"] == "matmul":
        checks.append((f"matmul {r['node']}: {r['value']} against {r['reference']}: {r['status']}",
                       None if dry or r["status"] == "SKIP" else r["status"] == "PASS"))
checks.append((f"prolog verdict {second.get('result')} in {second.get('duration_s', 0):.0f} s",
               None if dry else second.get("result") == "PASS"))
for what, ok in checks:
    print(f"  [{'-' if ok is None else 'ok' if ok else 'WRONG'}] {what}")
EOF3
}

# --- Issue 24: tensor parallelism T = 2 on two GPUs of this node; ~1.5 min on two H200s ----------------------
sec_tp() {
# The same ViT-B/16 at 384 (577 tokens) in bf16, micro batch 32, on GPUs $GPU and $GPU2 (default: the next one):
# FSDP2 over the 2 GPUs (D = 2), TP 2 with DTensor under FSDP2 (D = 1), and TP 2 with DeepSpeed's AutoTP under
# ZeRO-1 (D = 1). NCCL refuses two ranks on one GPU, so with one GPU visible the points are skipped, saying so.
# What only GPUs show: AutoTP on NCCL (tried on gloo only), TP's activation all-reduces over NVLink or PCIe
# against FSDP2's gathers at equal ranks, and TP's memory per rank (activations split T ways) on the device.
if [[ $DRY == 1 ]]; then
  TP_DEV=(--device cpu --gpus 2); TP_MODEL=(--model vit-micro-h4-p4-32 --precision fp32 --micro-batch 8)
  TP_STEPS=(--steps 6 --timing-warmup 2); NGPU=2
else
  NGPU=$(nvidia-smi -L | wc -l)
  GPU2=${GPU2:-$(( (GPU + 1) % (NGPU > 0 ? NGPU : 1) ))}
  TP_DEV=(--device cuda --gpus 2); TP_MODEL=(--model vit-b16-384 --precision bf16 --micro-batch 32)
  TP_STEPS=(--steps 30 --timing-warmup 8)
fi
if [[ $NGPU -ge 2 ]]; then
  for arm in "fsdp2:--engine fsdp2" "tp2:--engine fsdp2 --tensor-parallel 2" "autotp2:--tensor-parallel 2 --zero-stage 1"; do
    name=${arm%%:*}; read -r -a extra <<<"${arm#*:}"
    if [[ $DRY == 1 ]]; then sel=(); else sel=(env CUDA_VISIBLE_DEVICES="$GPU,$GPU2" CUDA_DEVICE_ORDER=PCI_BUS_ID); fi
    "${sel[@]}" $PY -m bench run "${TP_MODEL[@]}" "${TP_STEPS[@]}" "${TP_DEV[@]}" --dataset synthetic --synthetic-size 4096 \
        --no-eval "${extra[@]}" --out "$OUT/tp-$name" --json > "$OUT/tp-$name.json" 2> "$OUT/tp-$name.err" \
        || echo "   $name exited $? (its row says why)"
  done
fi
$PY - "$OUT" "$DRY" "$NGPU" <<'EOF4'
import json, sys
out, dry, ngpu = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
checks = []
if ngpu < 2:
    checks.append((f"TP = 2 needs 2 GPUs on this node ({ngpu} visible; NCCL refuses two ranks on one GPU): skipped", None))
else:
    recs = {}
    for name in ("fsdp2", "tp2", "autotp2"):
        try:
            recs[name] = json.load(open(f"{out}/tp-{name}.json"))
        except (OSError, ValueError):
            recs[name] = {"status": "missing"}
    print(f"{'arm':<9}{'status':>8}{'img/s':>10}{'per replica':>12}{'TP MB/step':>11}{'x Megatron':>11}"
          f"{'states MiB':>11}{'peak GiB':>9}")
    for name, r in recs.items():
        f = r.get("figures") or {}
        tp = (f.get("comm") or {}).get("tensor_parallel") or {}
        states = (f.get("model_states") or {}).get("measured") or {}
        peak = max(f.get("peak_memory_bytes") or [0]) / 2**30
        img = f.get("images_per_s")
        print(f"{name:<9}{r.get('status'):>8}{img or 0:>10.1f}{f.get('images_per_s_per_replica') or 0:>12.1f}"
              f"{(tp.get('bytes_per_step') or 0) / 1e6:>11.2f}{tp.get('measured_over_analytic') or 0:>11.3f}"
              f"{(states.get('total') or 0) / 2**20:>11.1f}{peak:>9.2f}")
        if r.get("status") != "ok":
            checks.append((f"{name}: {r.get('status')}: {(r.get('error') or {}).get('reason')}", False))
    for name in ("tp2", "autotp2"):
        f = recs[name].get("figures")
        if not f:
            continue
        tp = f["comm"]["tensor_parallel"]
        checks.append((f"{name}: counted TP bytes {tp['measured_over_analytic']:.3f}x Megatron's "
                       f"{tp['analytic']['formula']}", abs(tp["measured_over_analytic"] - 1) <= 0.05))
        t = f["tensor_parallel"]
        checks.append((f"{name}: each GPU holds half the split layers ({t['local_split_params_per_rank']} of "
                       f"{t['split_params']:,})", all(x == t["split_params"] // 2 for x in t["local_split_params_per_rank"])))
        checks.append((f"{name}: loss {f['loss']['first']:.3f} -> {f['loss']['last']:.3f}, finite and falling",
                       None if dry else f["sanity"]["loss_fell"] and f["sanity"]["loss_finite"]))
        if not dry:
            checks.append((f"{name}: communication time null with a reason on GPUs", f.get("comm_share") is None
                           and bool(f.get("comm_share_reason"))))
for what, ok in checks:
    print(f"  [{'-' if ok is None else 'ok' if ok else 'WRONG'}] {what}")
EOF4
}

# --- Issue 31: validate's per-GPU workload on this GPU, and bench comm's small messages ---------------------
sec_comm() {
# This node alone, its first slot: GPU 0 (validate picks GPUs by slot, not by CUDA_VISIBLE_DEVICES), one CPU rank
# in the dry run.
$PY -m bench validate --hostfile "$OUT/validate-hostfile" --level quick --checks throughput \
    --out "$OUT/validate-quick" --json > "$OUT/validate-quick.json" 2> "$OUT/validate-quick.err"
if [[ $DRY == 1 ]]; then COMM_N=2; COMM_DEV=(--device cpu); else COMM_N=$(nvidia-smi -L | wc -l); COMM_DEV=(--device cuda); fi
( [[ $DRY == 0 ]] && unset CUDA_VISIBLE_DEVICES
  $PY -m bench comm --gpus "$COMM_N" "${COMM_DEV[@]}" --sizes 1K,1M --iters 20 --warmup-iters 5 --out "$OUT/comm" --json \
      > "$OUT/comm.json" 2> "$OUT/comm.err" )
$PY - "$OUT" "$DRY" "$COMM_N" "${NCCL_TESTS_1K_US:-}" <<'EOF5'
import glob, json, statistics, sys
out, dry, n, published = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, ".")
from bench.analysis import figures
checks = []
if not glob.glob(f"{out}/validate-quick/*/runs/*/alone/rank*.json"):
    checks.append((f"validate --level quick --checks throughput: no per-GPU run "
                   f"({open(f'{out}/validate-quick.err', errors='replace').read()[-300:]})", False))
for p in sorted(glob.glob(f"{out}/validate-quick/*/runs/*/alone/rank*.json")):
    s = json.load(open(p))
    r = s["ranks"][0]
    step = statistics.median(r["step_s"])
    name = (r.get("gpu") or {}).get("name") or "cpu"
    peak, why = figures.peak_flops_of(name, "fp32")
    batch = json.load(open(p.rsplit("/alone/", 1)[0] + "/config.json"))["micro_batch"]
    bound = s["flops_per_image"] * batch / peak if peak and s.get("flops_per_image") else None
    checks.append((f"validate's per-GPU workload {s['model']['timm_name']} @{s['model']['img_size']} on {name}: median "
                   f"step {step * 1e3:.1f} ms (bound at the fp32 peak {bound * 1e3 if bound else float('nan'):.1f} ms); "
                   f"timed by {r.get('step_timing')}",
                   None if dry else bound is not None and step >= bound and "CUDA events" in str(r.get("step_timing"))))
try:
    c = json.load(open(f"{out}/comm.json"))
    rows = {r["size"]: r for r in c.get("rows") or []}
    one = rows.get(1024)
    pub = f"published nccl-tests figure {published} us" if published else \
        "no published nccl-tests 1 KiB figure for this GPU given (NCCL_TESTS_1K_US)"
    checks.append((f"bench comm over {n} rank(s): 1 KiB all_reduce {one['time_s']['median'] * 1e6:.1f} us a collective, "
                   f"k = {one['back_to_back']} back-to-back a sample; {pub}",
                   None if dry or not published or n < 2 else one["time_s"]["median"] * 1e6 <= 2 * float(published)))
    checks.append((f"bench comm says how it timed: {c.get('timing', '')[:80]}...", bool(c.get("timing"))))
except (OSError, ValueError, KeyError, TypeError) as e:
    checks.append((f"bench comm: no row for 1 KiB ({e})", False))
for what, ok in checks:
    print(f"  [{'-' if ok is None else 'ok' if ok else 'WRONG'}] {what}")
EOF5
}

# --- hang (issue 22): where each rank is when the watchdog fires (the flight recorder on NCCL) ----------------
sec_hang() {
if [[ ! -f tests/faults.py ]]; then
  echo "   skipped: tests/faults.py is not here (run from a checkout: its sitecustomize makes the stall)"
  return 0
fi
HR=1
if [[ $DRY == 1 ]]; then HR=2; elif [[ $(nvidia-smi -L | wc -l) -ge 2 ]]; then HR=2; fi
mkdir -p "$OUT/hang-site"
$PY -c "import sys; sys.path.insert(0, '.'); from tests.faults import block_data_loading; print(block_data_loading(3, rank=$((HR - 1))))" \
  > "$OUT/hang-site/sitecustomize.py"
HSITE=$(cd "$OUT/hang-site" && pwd)  # absolute: the ranks start in their run directory
HDEV=("${DEV[@]}")
HDEV[${#HDEV[@]}-1]=$HR  # --gpus
# On GPUs bench's watchdog fires first by default (issue 31); on CPU (gloo) the ranks' own timeouts report first
# unless the collective timeout is longer than --timeout: the dry run asks for that, to walk the same path.
HCT=()
[[ $DRY == 1 ]] && HCT=(--collective-timeout 600)
start=$(date +%s)
( [[ $HR == 2 && $DRY == 0 ]] && unset CUDA_VISIBLE_DEVICES
  # 200 steps: should the stall not come, the run ends by itself and the checks say WRONG.
  PYTHONPATH="$HSITE${PYTHONPATH:+:$PYTHONPATH}" $PY -m bench run --model vit-micro-p4-32 \
    --dataset synthetic --synthetic-size 2048 --micro-batch 16 --steps 200 --no-eval --timeout 20 \
    "${HCT[@]}" "${HDEV[@]}" --out "$OUT/hang" --json > "$OUT/hang.json" 2> "$OUT/hang.err" )
echo "   bench exited $? after $(( $(date +%s) - start )) s"
if [[ $HR == 2 ]]; then
  # The same stall with the collective timeout shorter than bench's watchdog: NCCL's watchdog aborts the ranks.
  start=$(date +%s)
  ( [[ $DRY == 0 ]] && unset CUDA_VISIBLE_DEVICES
    PYTHONPATH="$HSITE${PYTHONPATH:+:$PYTHONPATH}" $PY -m bench run --model vit-micro-p4-32 \
      --dataset synthetic --synthetic-size 2048 --micro-batch 16 --steps 200 --no-eval --timeout 120 \
      --collective-timeout 30 "${HDEV[@]}" --out "$OUT/hang-abort" --json > "$OUT/hang-abort.json" 2> "$OUT/hang-abort.err" )
  echo "   bench (NCCL's watchdog first) exited $? after $(( $(date +%s) - start )) s"
fi
$PY - "$OUT" "$HR" <<'EOF2'
import glob, json, os, sys
out, ranks = sys.argv[1], int(sys.argv[2])
try:
    rec = json.load(open(f"{out}/hang.json"))
except (OSError, ValueError) as e:
    print(f"  [WRONG] no record: {e}; {open(f'{out}/hang.err', errors='replace').read()[-600:]}")
    sys.exit(0)
err, cuda = rec.get("error") or {}, rec["plan"]["device"] == "cuda"
at = {e["rank"]: e for e in err.get("ranks_at") or []}
hang = err.get("hang") or {}
fr = (hang.get("flight_recorder") or {}).get("analyzer") or {}
run_dir = rec["run_dir"]
stacks = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(run_dir, "stacks", "rank*.json")))]
writers = {(s.get("flight_recorder") or {}).get("writer") for s in stacks}
blocked = at.get(ranks - 1, {})
print(f"  bench: {err.get('reason')}")
dumped = sorted(os.path.basename(p) for p in glob.glob(os.path.join(run_dir, "flight", "rank*")))
checks = [
    (f"plan: {rec['plan'].get('first_to_fire')} fires first (collective timeout {rec['plan'].get('collective_timeout_s')} s, "
     f"watchdog {rec['plan'].get('watchdog_s')} s)" + (", no --collective-timeout given" if cuda else ""),
     rec["plan"].get("first_to_fire") == "watchdog" if cuda else None),
    (f"a dump per rank: {dumped}", dumped == [f"rank{r}" for r in range(ranks)]),
    (f"the blocked rank {ranks - 1} is named first, in data loading ({blocked.get('frame')})",
     err.get("rank") == ranks - 1 and blocked.get("doing") == "data loading"
     and str(err.get("reason", "")).startswith("hung at step 3: ")),
    (f"every rank answered the stack request ({(hang.get('stack_request') or {}).get('answered')})",
     (hang.get("stack_request") or {}).get("answered") == list(range(ranks))),
    (f"the dumps were written by {sorted(w or '-' for w in writers)}",
     (writers == {"torch._C._distributed_c10d._dump_nccl_trace"}) if cuda else None),
    (f"torch's analyzer read the dumps: {fr.get('ok')} {fr.get('error') or ''}".rstrip(),
     fr.get("ok") is True if cuda else None),
]
if ranks > 1:
    other = at.get(0, {})
    checks.append((f"rank 0 waits in {other.get('collective')} by the {other.get('source')} "
                   f"(device state {other.get('device_state')})",
                   (other.get("at") == "waiting" and (other.get("collective") or {}).get("op") == "all_reduce"
                    and other.get("source") == ("flight recorder" if cuda else "stack"))))
try:
    ab = json.load(open(f"{out}/hang-abort.json"))
except (OSError, ValueError):
    ab = None
if ab is not None:
    e = ab.get("error") or {}
    nw = e.get("nccl_watchdog") or {}
    print(f"  bench (NCCL's watchdog first): {e.get('reason')}")
    checks.append((f"NCCL's watchdog aborted the ranks; bench named rank {e.get('rank')} ({e.get('where')}), odd by "
                   f"the watchdogs' counts: {nw.get('odd_ranks')}",
                   (e.get("rank") == ranks - 1 and bool(nw) and "SIGABRT" not in str(e.get("reason"))) if cuda else None))
for what, ok in checks:
    print(f"  [{'-' if ok is None else 'ok' if ok else 'WRONG'}] {what}")
EOF2
}
