#!/usr/bin/env bash
# What only a GPU can show, in sections that fit one device call: the never-run code first, each section under a
# time budget printed before it starts, the default run under 9 minutes on one H100.
#
#   benchmarks/gpu-check.sh --plan                     # the sections, their order and budgets; runs nothing
#   benchmarks/gpu-check.sh [OUT_DIR]                  # the default run (default OUT_DIR: results/gpu-check)
#   benchmarks/gpu-check.sh --only copies,burn [OUT]   # these sections (in the order below), after the check
#   benchmarks/gpu-check.sh --dry-run [--only ...]     # the same plumbing on CPU with tiny models
#   GPU=3 benchmarks/gpu-check.sh                      # another GPU of the node (nvidia-smi's index)
#
# The sections (benchmarks/gpu-check-sections.sh: what each runs and checks), in this order:
#   check     the driver, torch's CUDA and whether they can work together (CUDA 13.x needs a driver >= 580:
#             torch 2.14.1+cu130 on 535-570 sees no GPU); stops the run in one line if not
#   copies    issues 41/48: H2D, D2H, both, D2D alone and all at once, the PCIe link, beside nvbandwidth
#   burn      issues 41/48: the GPU hot for $BURN (60 s), NVML each second, each GPU on its own
#   dcgm      DCGM level 1 and its pcie test, where dcgmi is installed
#   numerics  issue 25: the numerics job saved and reproduced bit for bit, the bf16 matmul
#   comm      issue 31: validate's per-GPU workload timed by CUDA events, bench comm's 1 KiB latency
#   hang      issue 22: a hung run's ranks, where each one is, the flight recorder on NCCL
#   tp        issue 24: tensor parallelism T = 2 (two GPUs; skipped on one)
#   cases     bench against a bare timm-style loop, ViT-B/16 @224 and a CIFAR-native ViT, bf16
#   issue21   Slurm task binding per engine (reruns the cases' second run), memory window, fp16 skipped steps,
#             ZeRO-3 from the CPU model
# The default run is the sections in this order while their budgets add up to under LIMIT_S (9 minutes on one
# H100: one device call is 10); --plan names the rest, grouped into calls of under 9 minutes each. A budget is
# a limit, not a forecast: a section still running at its budget is stopped (timeout, its process group) and
# says so; what it wrote stays under OUT_DIR. Budgets are estimates for one H100 from the sections' own
# commands (startup, steps, timeouts), not yet measured on one.
#
# Where it runs: in the image (docker run ... vitbench:latest benchmarks/gpu-check.sh, or apptainer exec), with
# the image's interpreter (/opt/venv/bin/python), or in a checkout with .venv. $PY overrides both. A GPU machine
# with torch and timm but no DeepSpeed and no network: carry the wheels of benchmarks/make-gpu-wheels.sh in
# $WHEELS (one folder per Python: the cp311/ or cp312/ that matches $PY is installed into $OUT/site, which goes
# first on PYTHONPATH; nothing else is touched).
set -uo pipefail

cd "$(dirname "$0")/.."
SECTIONS=(check copies burn dcgm numerics comm hang tp cases issue21)
declare -A BUDGET=([check]=20 [copies]=150 [burn]=160 [dcgm]=160 [numerics]=150 [comm]=100 [hang]=150 [tp]=110
                   [cases]=180 [issue21]=270)
declare -A WHAT=([check]="the driver, torch's CUDA, whether they work together"
                 [copies]="H2D, D2H, both, D2D alone and all at once; the PCIe link; nvbandwidth beside"
                 [burn]="the GPU hot for \$BURN (60 s), NVML each second"
                 [dcgm]="dcgmi diag -r 1 (60 s at most) and -r pcie (90 s at most), where installed"
                 [numerics]="the numerics job reproduced bit for bit; the bf16 matmul"
                 [comm]="validate's per-GPU workload by CUDA events; bench comm at 1 KiB"
                 [hang]="a hung run: its ranks, where each one is, the flight recorder"
                 [tp]="tensor parallelism T = 2 (two GPUs; one: skipped)"
                 [cases]="bench against a timm-style loop, two models, bf16"
                 [issue21]="Slurm task binding per engine, memory window, fp16 skips, ZeRO-3 (after cases)")
LIMIT_S=540

DRY=0 PLAN=0 ONLY="" OUT=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --dry-run) DRY=1 ;;
    --plan) PLAN=1 ;;
    --only) [[ $# -ge 2 ]] || { echo "gpu-check: --only needs section names (${SECTIONS[*]})" >&2; exit 2; }
            ONLY=$2; shift ;;
    --only=*) ONLY=${1#--only=} ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "gpu-check: unknown option $1 (--plan, --only NAME[,NAME], --dry-run)" >&2; exit 2 ;;
    *) OUT=$1 ;;
  esac
  shift
done
OUT=${OUT:-results/gpu-check}

in_list() { local x=$1; shift; for y in "$@"; do [[ $x == "$y" ]] && return 0; done; return 1; }

# What runs: the check, then the sections asked for (in SECTIONS' order), or the default prefix.
RUN=(check)
if [[ -n "$ONLY" ]]; then
  IFS=, read -r -a ASKED <<<"$ONLY"
  for name in "${ASKED[@]}"; do
    in_list "$name" "${SECTIONS[@]}" || { echo "gpu-check: --only: no section '$name' (${SECTIONS[*]})" >&2; exit 2; }
  done
  for name in "${SECTIONS[@]:1}"; do in_list "$name" "${ASKED[@]}" && RUN+=("$name"); done
else
  total=${BUDGET[check]}
  for name in "${SECTIONS[@]:1}"; do
    (( total + BUDGET[$name] < LIMIT_S )) || break
    RUN+=("$name"); total=$(( total + BUDGET[$name] ))
  done
fi

plan() {
  local n=0 total=0 name
  echo "gpu-check plan: sections in order, each with its budget on one H100 (a limit: stopped there)"
  for name in "${SECTIONS[@]}"; do
    n=$((n + 1))
    printf '  %2d  %-9s %4d s  %s%s\n' "$n" "$name" "${BUDGET[$name]}" "${WHAT[$name]}" \
      "$(in_list "$name" "${RUN[@]}" && echo "  [this run]")"
    in_list "$name" "${RUN[@]}" && total=$(( total + BUDGET[$name] ))
  done
  printf 'this run: %s: %d s (%d min %02d s)%s\n' "${RUN[*]}" "$total" $((total / 60)) $((total % 60)) \
    "$( (( total < LIMIT_S )) && echo ", under $((LIMIT_S / 60)) min" || echo ", past $((LIMIT_S / 60)) min: more than one device call")"
  local rest=() group=() sum=0
  for name in "${SECTIONS[@]:1}"; do in_list "$name" "${RUN[@]}" || rest+=("$name"); done
  [[ ${#rest[@]} -gt 0 ]] || return 0
  echo "not in this run, in calls of under $((LIMIT_S / 60)) min each (the check runs first in every call):"
  for name in "${rest[@]}"; do
    if (( ${#group[@]} > 0 && BUDGET[check] + sum + BUDGET[$name] >= LIMIT_S )); then
      printf '  benchmarks/gpu-check.sh --only %s   # %d s\n' "$(IFS=,; echo "${group[*]}")" $((sum + BUDGET[check]))
      group=(); sum=0
    fi
    group+=("$name"); sum=$(( sum + BUDGET[$name] ))
  done
  printf '  benchmarks/gpu-check.sh --only %s   # %d s\n' "$(IFS=,; echo "${group[*]}")" $((sum + BUDGET[check]))
}

if [[ $PLAN == 1 ]]; then plan; exit 0; fi

if [[ -z "${PY:-}" ]]; then
  if [[ -n "${VITBENCH_IMAGE:-}" && -x /opt/venv/bin/python ]]; then PY=/opt/venv/bin/python
  elif [[ -x .venv/bin/python ]]; then PY=.venv/bin/python
  else PY=python3; fi
fi
GPU=${GPU:-0}
mkdir -p "$OUT"
if ! $PY -c "import deepspeed" 2>/dev/null; then
  tag=$($PY -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  WHEELS=${WHEELS:-benchmarks/wheels}/$tag
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    echo "# gpu-check: no deepspeed in $PY; installing the carried wheels of $WHEELS into $OUT/site" >&2
    $PY -m pip install -q --no-index --no-deps --target "$OUT/site" "$WHEELS"/*.whl \
      || { echo "gpu-check: installing from $WHEELS failed" >&2; exit 2; }
    export PYTHONPATH="$PWD/$OUT/site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "gpu-check: $PY has no deepspeed and $WHEELS holds no wheels (benchmarks/make-gpu-wheels.sh)" >&2
    exit 2
  fi
fi
export OUT PY DRY GPU

# The dry run's tiny models on two shared cores take longer than the real ones on a GPU (tp's three 2-rank runs:
# past 110 s at load 8-10 here): its budgets are the H100's x DRY_SCALE, still enforced.
DRY_SCALE=3
echo "# gpu-check $(date -Is) $(hostname): $PY, GPU $GPU$([[ $DRY == 1 ]] && echo ", dry run on CPU"): ${RUN[*]}"
for name in "${RUN[@]}"; do
  budget=${BUDGET[$name]}
  if [[ $DRY == 1 ]]; then
    budget=$(( budget * DRY_SCALE ))
    echo "## $name (budget $budget s: the H100's ${BUDGET[$name]} s x $DRY_SCALE on CPU): ${WHAT[$name]}"
  else
    echo "## $name (budget $budget s): ${WHAT[$name]}"
  fi
  start=$(date +%s)
  # Its own process group, killed whole at the budget: bench, its ranks and any tool the section started.
  timeout --kill-after=10 "$budget" bash -c 'source benchmarks/gpu-check-sections.sh && setup && "sec_$1"' _ "$name"
  rc=$?
  took=$(( $(date +%s) - start ))
  if [[ $rc == 124 || $rc == 137 ]]; then
    echo "   $name stopped at its budget of $budget s; what it wrote is under $OUT"
  elif [[ $name == check && $rc != 0 ]]; then
    exit 2   # the check said why, in one line
  fi
  echo "   $name: $took s of its $budget s"
done
