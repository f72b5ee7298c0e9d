#!/usr/bin/env bash
# bench/torchtitan_gpu.sh — torchtitan's Trainer with and without gnmr on a
# GPU session (docs/python.md, "At scale"; docs/performance.md):
#
#   TORCHTITAN_REPO=/path/to/torchtitan-checkout bash bench/torchtitan_gpu.sh [STEPS] [--out DIR]
#
# Needs: a CUDA torch with torchtitan 0.3.0 importable (the GPU machine has
# no registry: carry its wheel and the ones it lacks, device README), the
# gnmr package (tests/python/gpu.sh builds it with GNMR_CUDA=1), and a
# torchtitan checkout for the debug config's assets (tests/assets/tokenizer,
# the c4_test dataset), which the Trainer reads relative to the working
# directory. Runs llama3_debugmodel for STEPS (default 50) steps on every
# visible GPU, twice: torchtitan's AdamW, then GnmrOptimizersContainer with
# the gnmr preset; the logs (tokens/s and step times per step) go to
# --out DIR (absolute), default build-gpu-titan/out.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=50
out="$root/build-gpu-titan/out"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    *) steps="$1"; shift ;;
  esac
done
mkdir -p "$out"
repo="${TORCHTITAN_REPO:?set TORCHTITAN_REPO to a torchtitan checkout (its tests/assets)}"
py="${GNMR_PYTHON:-python3}"
"$py" -c "import torchtitan, gnmr; assert gnmr.cuda_built()" || {
  echo "torchtitan_gpu.sh: needs torchtitan and a CUDA build of gnmr importable by $py" >&2; exit 1; }
ngpu="$("$py" -c 'import torch; print(torch.cuda.device_count())')"
cd "$repo"
rc=0
for arm in torch gnmr; do
  extra=()
  [ "$arm" = gnmr ] && extra=(--gnmr gnmr)
  "$py" -m torch.distributed.run --nproc_per_node "$ngpu" "$root/bench/python/torchtitan_run.py" \
    "${extra[@]}" --module llama3 --config llama3_debugmodel --training.steps "$steps" \
    >"$out/titan-$arm.log" 2>&1 || rc=1
  grep -E "step: *$steps|gnmr:" "$out/titan-$arm.log" | tail -n 3
done
exit "$rc"
