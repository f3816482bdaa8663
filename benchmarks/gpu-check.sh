#!/usr/bin/env bash
# One-GPU check of bench against a bare timm training loop, sized for under 6 minutes on one H200.
#
#   benchmarks/gpu-check.sh [OUT_DIR]              # on a node with a GPU (default OUT_DIR: results/gpu-check)
#   benchmarks/gpu-check.sh --dry-run [OUT_DIR]    # the same plumbing on CPU with tiny models, ~2 min on 2 cores
#
# For each of ViT-B/16 at 224 in bf16 (the study's model) and a CIFAR-native
# ViT (vit-tiny-p4-32 in bf16), on GPU 0:
#   1. `bench run` on one rank: images/s, TFLOP/s, MFU (peak from bench/gpus.py's
#      table for the GPU the rank saw and the precision), data share, peak memory,
#      all from the run's record (results.jsonl);
#   2. benchmarks/timm_train_bench.py, a minimal equivalent of timm's benchmark.py
#      train mode (timm model, torch AMP, fused AdamW, random input; NOT timm's
#      own script, which is not in timm's pip package), same model and batch;
# then one table with bench/timm-equivalent. Differences to expect: DeepSpeed's
# bf16 keeps bf16 weights with fp32 master copies where AMP autocasts fp32
# weights; bench syncs the device between the parts of a step to time them,
# and clips gradients.
# Time budget on an H200: 4 processes x (start-up ~20-40 s + 40 steps); well under 6 min.
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY=1; shift; fi
OUT=${1:-results/gpu-check}
mkdir -p "$OUT"

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
  command -v nvidia-smi >/dev/null && nvidia-smi -L || { echo "gpu-check: no GPU (use --dry-run on CPU)" >&2; exit 2; }
  DEV=(--device cuda --gpus 1)
  TDEV=(--device cuda)
  PREC=bf16
  STEPS=(--steps 40 --timing-warmup 10)
  TSTEPS=(--steps 30 --warmup 10)
  # preset timm_name img patch batch [embed depth heads]
  CASES=("vit-b16-224 vit_base_patch16_224 224 16 256"
         "vit-tiny-p4-32 vit_tiny_patch16_224 32 4 256")
fi

echo "# gpu-check $(date -Is) $(hostname): $($PY -c 'import torch;print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")')"
i=0
for case in "${CASES[@]}"; do
  read -r preset timm_name img patch batch embed depth heads <<<"$case"
  i=$((i + 1))
  echo "## case $i: $preset ($timm_name @ $img, patch $patch), batch $batch, $PREC"
  start=$(date +%s)
  $PY -m bench run --model "$preset" --dataset synthetic --precision "$PREC" --micro-batch "$batch" \
      "${STEPS[@]}" "${DEV[@]}" --no-eval --out "$OUT/bench-$i" --json > "$OUT/bench-$i.json"
  extra=()
  [[ -n "${embed:-}" ]] && extra=(--embed-dim "$embed" --depth "$depth" --num-heads "$heads")
  $PY benchmarks/timm_train_bench.py --model "$timm_name" --img-size "$img" --patch-size "$patch" \
      --batch "$batch" --precision "$PREC" "${TSTEPS[@]}" "${TDEV[@]}" "${extra[@]}" > "$OUT/timm-$i.json"
  echo "   took $(( $(date +%s) - start )) s"
done

$PY - "$OUT" "$i" <<'EOF'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
def pct(x): return "-" if x is None else f"{x * 100:.1f}%"
print(f"{'model':<18}{'bench img/s':>12}{'TFLOP/s':>9}{'MFU':>7}{'data':>7}{'mem GiB':>9}"
      f"{'timm-eq img/s':>15}{'MFU':>7}{'mem GiB':>9}{'bench/timm-eq':>15}")
for i in range(1, n + 1):
    rec = json.load(open(f"{out}/bench-{i}.json"))
    t = json.load(open(f"{out}/timm-{i}.json"))
    if rec["status"] != "ok":
        print(f"case {i}: bench run {rec['status']}: {rec.get('error')}")
        continue
    f = rec["figures"]
    mem = max(f["peak_memory_bytes"]) / 2**30
    tmem = (t["peak_memory_bytes"] or 0) / 2**30
    print(f"{rec['config']['model']:<18}{f['images_per_s']:>12.1f}{f.get('tflops', 0):>9.2f}{pct(f['mfu']):>7}"
          f"{pct(f['data_share']):>7}{mem:>9.2f}{t['images_per_s']:>15.1f}{pct(t['mfu']):>7}{tmem:>9.2f}"
          f"{f['images_per_s'] / t['images_per_s']:>15.3f}")
    if f["mfu"] is None:
        print(f"  no MFU: {f.get('mfu_reason')}")
EOF
