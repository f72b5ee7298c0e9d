#!/usr/bin/env bash
# bench/gpu-verdict.sh — issue 32, part 4: the operator-outliers verdict on
# --device cuda, on the held-out seeds the CPU verdict used (201-240), and
# the comparison with the CPU's conclusions (docs/record/stability-verdict.md,
# "Issue 31"; docs/record/performance-gpu.md, runbook).
#
#   bash bench/gpu-verdict.sh [--seeds 201-240] [--jobs 4]
#
# On the GPU machine, after `bash bench/gpu-demo.sh --stage` here (the
# training text travels in .fortunes/). Runs the suite through
# bench/gpu-demo.sh (which builds gnmr-demo against the machine's CUDA
# libtorch) with arms low, high, default, stabilizer; a suite that outlives
# one call resumes from its cache (build-gpu-demo/suite/runs): call it again.
# Then compares with the CPU run's results, committed in
# docs/data/verdict-issue31-oo-cpu.csv, pair by pair (default − stabilizer,
# default − low, stabilizer − low, high − low): exit 0 when every
# conclusion is the same on both devices.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seeds=201-240
jobs=4
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "$root"
bash bench/gpu-demo.sh --seeds "" --out build-gpu-demo/verdict \
  --suite "--scenario operator-outliers --arms low,high,default,stabilizer --seeds $seeds --jobs $jobs" || exit $?
python3 bench/python/compare_verdicts.py docs/data/verdict-issue31-oo-cpu.csv \
  build-gpu-demo/verdict/suite-results.csv --scenario operator-outliers
