#!/usr/bin/env bash
# tests/python/gpu.sh — the Python package on a GPU machine (PyTorch with
# CUDA, nvcc; it needs no package registry), in one command:
#
#   bash tests/python/gpu.sh
#
# 1. builds the package for the GPU's architecture (pip install
#    --no-build-isolation --target, GNMR_CUDA=1, TORCH_CUDA_ARCH_LIST from
#    the visible GPU unless set) for the python that imports a CUDA torch
#    ($GNMR_PYTHON, python3, /usr/bin/python3);
# 2. builds the two C++ references of the decision tests (gnmr_py_reference,
#    gnmr-replay) with g++ alone: the GPU machine has no Catch2;
# 3. runs tests/python with GNMR_PY_REQUIRE_GPU=1 (the CUDA tests fail
#    instead of skipping when the GPU or the CUDA build is missing);
# 4. runs bench_adamw_gpu.py and bench/python/trainer_cost.py (docs/performance.md).
# Logs go to --out DIR (bash tests/python/gpu.sh --out DIR), default build-gpu-python/out.
# --build-only stops after step 1 (bench/mx-proxy-gpu.sh uses the package so).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
b="$root/build-gpu-python"
out="$b/out"
caller="$OLDPWD"  # a relative --out DIR is taken from where the script was called
build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) case "$2" in /*) out="$2" ;; *) out="$caller/$2" ;; esac; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) echo "unknown argument $1 (tests/python/gpu.sh [--out DIR] [--build-only])"; exit 2 ;;
  esac
done
mkdir -p "$b" "$out"

py=""
for cand in "${GNMR_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 || continue
  if "$cand" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
    py="$cand"
    break
  fi
done
[ -n "$py" ] || { echo "gpu.sh: no python3 with a CUDA torch and a visible GPU" >&2; exit 1; }
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
nvcc --version | tail -1

# --- 1. the package -------------------------------------------------------------
# A private --target folder on PYTHONPATH, not a venv: the GPU machine's
# python3 is itself a venv (/opt/torch/.venv), and a venv made from it with
# --system-site-packages sees the base interpreter's packages, not torch.
rm -rf "$b/site"
install=("$py" -m pip install --no-build-isolation --no-index --no-deps --target "$b/site" ./python)
export PYTHONPATH="$b/site${PYTHONPATH:+:$PYTHONPATH}"
export GNMR_CUDA=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}"
if ! "${install[@]}" -v >"$out/pip.log" 2>&1; then
  tail -n 60 "$out/pip.log"
  echo "gpu.sh: the package did not build (log: $out/pip.log)" >&2
  exit 1
fi
grep -E "nvcc|arch=" "$out/pip.log" | head -n 3
"$py" -c "import gnmr; assert gnmr.cuda_built(); print('gnmr', gnmr.__version__, 'with CUDA')" || exit 1
[ "$build_only" = 1 ] && exit 0

# --- 2. the C++ references ------------------------------------------------------
cxx=(g++ -O2 -std=c++17 -ffp-contract=off -Iinclude)
"${cxx[@]}" tests/python/reference.cpp -o "$b/gnmr_py_reference" || exit 1
"${cxx[@]}" tools/replay.cpp -o "$b/gnmr-replay" || exit 1

# --- 3. tests -------------------------------------------------------------------
rc=0
if ! "$py" -c "import pytest" >/dev/null 2>&1; then
  echo "gpu.sh: this python has no pytest: tests not run (the benchmark still runs)" | tee "$out/pytest.log"
  rc=1
else
(cd "$b" && GNMR_PY_REQUIRE_GPU=1 GNMR_PY_REFERENCE="$b/gnmr_py_reference" GNMR_REPLAY="$b/gnmr-replay" \
  timeout 900 "$py" -m pytest -q -p no:cacheprovider -rs "$root/tests/python") 2>&1 | tee "$out/pytest.log"
rc=${PIPESTATUS[0]}
fi

# --- 4. benchmarks --------------------------------------------------------------
timeout 600 "$py" tests/python/bench_adamw_gpu.py 2>&1 | tee "$out/bench.log"
# What a Trainer user pays: a ~100M Llama under transformers.Trainer, bf16 and float8
# (docs/performance.md, "What a Trainer user pays").
timeout 600 "$py" bench/python/trainer_cost.py 2>&1 | tee "$out/trainer-cost.log"
timeout 600 "$py" bench/python/trainer_cost.py --float8 2>&1 | tee -a "$out/trainer-cost.log"
exit "$rc"
