#!/usr/bin/env bash
# bench/gpu.sh — build, check and time gnmr's CUDA backend on a machine with
# an NVIDIA GPU (built for sm_90: H100 class; CMake and nvcc on the machine),
# in one command that stays under ten minutes (bench/gpu-common.sh):
#
#   bash bench/gpu.sh [--quick] [--out DIR]
#     (no option)   tests, sanitizers, full benchmarks, torch anchors
#     --quick       the same without the 13B layout
#     --out DIR     where the logs and summary.md go (default build-gpu/out)
#
# Steps: configure (-DCMAKE_CUDA_ARCHITECTURES=90) and build the GPU targets;
# ctest -L gpu; gnmr_bench_cuda; compute-sanitizer memcheck and racecheck
# over gnmr_cuda_tests (at reduced sizes, GNMR_CUDA_TEST_QUICK=1); the
# PyTorch anchors (bench/cuda/torch_anchors.py) when python3 has a CUDA
# torch; then a short summary table, printed last (and kept in
# summary.md). Each step's timeout leaves room for the later ones.
#
# A GPU machine may have nvcc and CMake but no Catch2 or Google Benchmark;
# the GPU targets need neither: stub packages let the top-level configure
# pass, and only the GPU targets are built.
set -uo pipefail
# On this machine a GPU is the point: the test programs must fail, not exit
# 77 (CTest: "Skipped"), when they find no usable device, e.g. because the
# driver is older than the CUDA runtime they were built with.
export GNMR_REQUIRE_GPU=1

caller="$PWD"  # a relative --out DIR is taken from where the script was called
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
quick=0
build=build-gpu
out="$root/$build/out"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --out) case "$2" in /*) out="$2" ;; *) out="$caller/$2" ;; esac; shift 2 ;;
    *) echo "unknown argument $1 (bench/gpu.sh [--quick] [--out DIR])"; exit 2 ;;
  esac
done
mkdir -p "$out" "$build"
jobs="$(nproc)"
summary=()
note() { summary+=("| $1 | $2 |"); }
# shellcheck source=bench/gpu-common.sh
. "$root/bench/gpu-common.sh"

stamp "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>/dev/null || true
nvcc --version | tail -2

# --- configure + build --------------------------------------------------------
stubs="$root/$build/stubs"
mkdir -p "$stubs/include/catch2" "$stubs/benchmark"
extra=()
if [ ! -f /usr/include/catch2/catch.hpp ] && [ ! -f /usr/local/include/catch2/catch.hpp ]; then
  echo '#error "Catch2 stub from bench/gpu.sh: the CPU tests are not built here"' >"$stubs/include/catch2/catch.hpp"
  extra+=("-DGNMR_CATCH2_INCLUDE_DIR=$stubs/include")
fi
if ! ls /usr/lib/*/cmake/benchmark/benchmarkConfig.cmake /usr/local/lib*/cmake/benchmark/benchmarkConfig.cmake \
  >/dev/null 2>&1; then
  cat >"$stubs/benchmark/benchmarkConfig.cmake" <<'EOF'
# Stub from bench/gpu.sh: lets bench/CMakeLists.txt configure; its Google
# Benchmark programs are not built on the GPU machine.
if(NOT TARGET benchmark::benchmark)
  add_library(benchmark::benchmark INTERFACE IMPORTED)
endif()
set(benchmark_FOUND TRUE)
EOF
  extra+=("-Dbenchmark_DIR=$stubs/benchmark")
fi
gen=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi

# NCCL (the reducer's single-rank GPU test): a PyTorch machine has it as the
# nvidia-nccl pip wheel rather than in the CUDA Toolkit.
if [ -z "${NCCL_HOME:-}" ]; then
  nccl_py="$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)"
  if [ -n "$nccl_py" ] && [ -f "$nccl_py/include/nccl.h" ]; then
    export NCCL_HOME="$nccl_py"
    echo "NCCL from the pip wheel: $NCCL_HOME"
  fi
fi

stamp "configure"
if cmake -S . -B "$build" ${gen[@]+"${gen[@]}"} -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGNMR_BUILD_CUDA=ON -DGNMR_BUILD_TESTS=ON -DGNMR_BUILD_BENCH=ON -DGNMR_BUILD_EXAMPLES=OFF -DGNMR_BUILD_TOOLS=OFF \
  -DGNMR_BUILD_DEMO=OFF -DGNMR_WITH_MPI=OFF -DGNMR_INSTALL=OFF ${extra[@]+"${extra[@]}"} \
  >"$out/configure.log" 2>&1; then
  note configure ok
else
  note configure FAILED
  tail -30 "$out/configure.log"
  printf '%s\n' "| step | result |" "|---|---|" "${summary[@]}"
  exit 1
fi

stamp "build"
if cmake --build "$build" --target gnmr_cuda_tests gnmr_bench_cuda -j"$jobs" >"$out/build.log" 2>&1; then
  note "build (gnmr_cuda_tests, gnmr_bench_cuda)" ok
else
  note build FAILED
  grep -E "error|FAILED" "$out/build.log" | head -30
  printf '%s\n' "| step | result |" "|---|---|" "${summary[@]}"
  exit 1
fi
# Other engineers' GPU-labelled tests, best effort (ctest reports them).
if grep -q "gnmr_nccl_reducer_gpu" "$build/build.ninja" "$build/Makefile" 2>/dev/null; then
  cmake --build "$build" --target gnmr_nccl_reducer_gpu -j"$jobs" >>"$out/build.log" 2>&1 ||
    echo "(gnmr_nccl_reducer_gpu did not build here; see build.log)"
fi
echo "configure + build: $((SECONDS - t0)) s"

# --- tests --------------------------------------------------------------------
stamp "ctest -L gpu"
(cd "$build" && timeout "$(budget 200 300)" ctest -L gpu --output-on-failure --timeout 200) >"$out/ctest.log" 2>&1
cat "$out/ctest.log" | tail -60
skipped="$(grep -c '(Skipped)' "$out/ctest.log")"
note "ctest -L gpu" "$(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1); skipped: $skipped"

# The NCCL reducer's own log lines (its cost), which ctest keeps to itself.
nccl_bin="$build/tests/mpi/gnmr_nccl_reducer_gpu"
if [ -x "$nccl_bin" ]; then
  timeout 60 "$nccl_bin" >"$build/nccl.log" 2>&1
  note "nccl_reducer_gpu (direct)" "rc $? | $(grep -E '^nccl_reducer_gpu:' "$build/nccl.log" | tr '\n' ' ')"
fi

# --- benchmarks -------------------------------------------------------------------
stamp "gnmr_bench_cuda"
bargs=()
[ $quick = 1 ] && bargs+=(--quick)
timeout "$(budget 150 200)" "$build/bench/cuda/gnmr_bench_cuda" ${bargs[@]+"${bargs[@]}"} >"$out/bench.log" 2>&1
note gnmr_bench_cuda "rc $?"
grep -E '^RESULT' "$out/bench.log" || tail -20 "$out/bench.log"

# --- sanitizers -----------------------------------------------------------------
san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
for tool in memcheck racecheck; do
  stamp "compute-sanitizer --tool $tool (quick sizes)"
  args=(--tool "$tool" --error-exitcode 9)
  [ "$tool" = memcheck ] && args+=(--leak-check full)
  GNMR_CUDA_TEST_QUICK=1 timeout "$(budget 120 $([ $tool = memcheck ] && echo 150 || echo 60))" "$san" "${args[@]}" "$build/tests/cuda/gnmr_cuda_tests" >"$out/$tool.log" 2>&1
  rc=$?
  tail -8 "$out/$tool.log"
  line="$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|HAZARD' "$out/$tool.log" | tail -1)"
  note "compute-sanitizer $tool" "rc $rc ${line:-(no summary line)}$([ $rc = 124 ] && echo ' TIMED OUT')"
done

# --- torch anchors ----------------------------------------------------------------
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  stamp "torch anchors"
  PYTHONUNBUFFERED=1 timeout "$(budget 120 0)" python3 bench/cuda/torch_anchors.py >"$out/torch.log" 2>&1
  note "torch anchors" "rc $?"
else
  note "torch anchors" "skipped (no CUDA torch)"
fi

# --- summary, last ----------------------------------------------------------------
{
  echo "## gnmr GPU run $(date -u +%Y-%m-%dT%H:%MZ) ($((SECONDS - t0)) s)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
  echo
  echo "| step | result |"
  echo "|---|---|"
  printf '%s\n' "${summary[@]}"
  echo
  grep -E '^\|' "$out/bench.log" 2>/dev/null
  echo
  grep -E '^\|' "$out/torch.log" 2>/dev/null
} >"$out/summary.md"
stamp "summary"
cat "$out/summary.md"
