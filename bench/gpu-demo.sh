#!/usr/bin/env bash
# bench/gpu-demo.sh — gnmr-demo on a machine with an NVIDIA GPU (built for
# sm_90: H100 class) and a CUDA PyTorch for python3, in one command that
# stays under ten minutes (bench/gpu-common.sh):
#
#   bash bench/gpu-demo.sh --stage      on a machine with the fortunes package:
#                                       copies its text into .fortunes/ (in
#                                       .gitignore), for a GPU machine without it
#   bash bench/gpu-demo.sh [--seeds "1 2 3"] [--steps N] [--out DIR]
#                                       on the GPU machine, with .fortunes/
#                                       copied there if it has no fortunes;
#                                       --seeds "1" --steps 100 is a shorter run
#   bash bench/gpu-demo.sh --seeds "" --suite "--scenario operator-outliers
#       --arms all --seeds 1-5 --layers 8 --width 256 --jobs 4"
#                                       the stability benchmark's suite on
#                                       --device cuda (docs/record/stability.md, "On a
#                                       GPU"); its results.csv and summary table
#                                       come back too. A suite that outlives one
#                                       call resumes from its cache in
#                                       build-gpu-demo/suite/runs.
#
# Builds gnmr-demo against the libtorch inside python3's PyTorch (CUDA) with
# the demo's CUDA step (gnmr's NormPlan, device controller and fused AdamW),
# runs a 5-step smoke on --device cuda with a global preset, the ladder and
# GNMR, then the default comparison (every controller, default stress) for
# each seed; the tables are printed last.
#
# Everything goes into 7 files of the output folder (--out DIR; default
# build-gpu-demo/out), few enough to copy back from a
# remote machine: demo-configure.log, demo-build.log, demo-smoke.log,
# demo-runs.log (every seed's output), summary.csv (every seed's, with a seed
# column), steps-seed<first>.csv and demo-results.tar.gz (each run's
# directory: its summary, steps and per-controller trace CSVs); with --suite
# also suite-table.txt and suite-results.csv.
set -uo pipefail

caller="$PWD"  # a relative --out DIR is taken from where the script was called
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ "${1:-}" = "--stage" ]; then
  mkdir -p .fortunes
  find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' -exec cp {} .fortunes/ \;
  echo "staged $(ls .fortunes | wc -l) files, $(du -sh .fortunes | cut -f1) in .fortunes/"
  exit 0
fi
seeds="1 2 3"
steps=""
suite=""
build=build-gpu-demo
out="$root/$build/out"
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --steps) steps="--steps $2"; shift 2 ;;
    --suite) suite="$2"; shift 2 ;;
    --out) case "$2" in /*) out="$2" ;; *) out="$caller/$2" ;; esac; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
mkdir -p "$out" "$build"
data=.fortunes
[ -d "$data" ] || data=/usr/share/games/fortunes
# shellcheck source=bench/gpu-common.sh
. "$root/bench/gpu-common.sh"
# The torch python (with its cmake and ninja) may be installed but not on PATH.
py=python3
if ! python3 -c 'import torch' >/dev/null 2>&1 && [ -x /opt/torch/.venv/bin/python3 ]; then
  py=/opt/torch/.venv/bin/python3
  export PATH="/opt/torch/.venv/bin:$PATH"  # its cmake and ninja too
fi

stamp "machine"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  nvcc --version 2>/dev/null | tail -1
  cmake --version 2>/dev/null | head -1
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"cxx11abi", torch.compiled_with_cxx11_abi(), "gpu", torch.cuda.is_available())' 2>&1 | tail -1
} | tee "$out/demo-configure.log"
prefix="$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"
[ -n "$prefix" ] || { echo "no python3 torch here: nothing to build against"; exit 1; }

stamp "configure (Torch from $prefix)"
gen=()
command -v ninja >/dev/null 2>&1 && [ ! -f "$build/CMakeCache.txt" ] && gen=(-G Ninja)
# TORCH_CUDA_ARCH_LIST: a CUDA libtorch's cmake (Caffe2/public/cuda.cmake)
# sets CMAKE_CUDA_ARCHITECTURES to OFF and puts -gencode flags for this list
# into CMAKE_CUDA_FLAGS; unset, it probes the GPU and, if that fails, falls
# back to a list of old architectures that nvcc 13 may refuse.
if ! timeout "$(budget 240 300)" cmake -S . -B "$build" ${gen[@]+"${gen[@]}"} -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DPython_EXECUTABLE="$(command -v "$py")" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DTORCH_CUDA_ARCH_LIST=9.0 -DGNMR_BUILD_CUDA=ON -DGNMR_BUILD_DEMO=ON \
  -DGNMR_BUILD_TESTS=OFF -DGNMR_BUILD_BENCH=OFF -DGNMR_BUILD_EXAMPLES=OFF -DGNMR_BUILD_TOOLS=OFF \
  -DGNMR_WITH_MPI=OFF -DGNMR_WITH_NCCL=OFF -DGNMR_INSTALL=OFF >>"$out/demo-configure.log" 2>&1; then
  tail -40 "$out/demo-configure.log"
  echo "configure FAILED"
  exit 1
fi
grep -E "CUDA detected|nvcc is|Header version|Added CUDA NVCC|Found Torch|WARNING" "$out/demo-configure.log" | head -12
stamp "build gnmr-demo"
if ! timeout "$(budget 300 150)" cmake --build "$build" --target gnmr-demo -j"$(nproc)" >"$out/demo-build.log" 2>&1; then
  grep -E "error|undefined|FAILED" "$out/demo-build.log" | head -40
  echo "build FAILED"
  exit 1
fi
demo="$build/demo/gnmr-demo"
ldd "$demo" 2>&1 | grep -E "not found|lib(torch|c10|cudart|cublas|cudnn|nccl)" | tee "$out/demo-smoke.log"

# The libraries PyTorch's wheels ship (torch/lib, nvidia/*/lib): python finds
# them through its own loader logic, the demo through libtorch's RUNPATH.
# Used only if the first smoke fails to load them.
wheel_libs() {
  "$py" - <<'EOF' 2>/dev/null
import glob, os, torch
dirs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
try:
    import nvidia
    for p in nvidia.__path__:
        dirs += sorted(glob.glob(os.path.join(p, "*", "lib")))
except Exception:
    pass
print(":".join(d for d in dict.fromkeys(dirs) if os.path.isdir(d)))
EOF
}

smoke() {
  timeout "$(budget 120 150)" "$demo" --device cuda --steps 5 --layers 1 --width 32 --fault-rate 0.5 \
    --controllers none,clip,skip-step,gnmr-ladder,gnmr --data "$data" --out "$build/smoke" >>"$out/demo-smoke.log" 2>&1
}
stamp "smoke: 5 steps on --device cuda"
if ! smoke; then
  if grep -qE "error while loading shared libraries|undefined symbol|version .* not found" "$out/demo-smoke.log"; then
    LD_LIBRARY_PATH="$(wheel_libs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    echo "== retry with the wheels' libraries first: LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$out/demo-smoke.log"
    smoke || { tail -40 "$out/demo-smoke.log"; echo "smoke FAILED"; exit 1; }
  else
    tail -40 "$out/demo-smoke.log"
    echo "smoke FAILED"
    exit 1
  fi
fi
tail -12 "$out/demo-smoke.log"
# The checks of CTest's demo_smoke_cuda (this build has no tests configured).
stamp "demo_smoke_cuda checks (tests/demo/run_demo_test.cmake)"
if timeout "$(budget 120 150)" cmake -DDEMO="$root/$demo" -DOUT="$root/$build/smoke-check" -DEXPECT_PNG=0 \
  -DDEVICE=cuda -DDATA="$(cd "$data" && pwd)" -DCONTROLLERS=none,clip,skip-step,gnmr-ladder,gnmr \
  -P tests/demo/run_demo_test.cmake >>"$out/demo-smoke.log" 2>&1; then
  echo "demo_smoke_cuda checks: passed"
else
  echo "demo_smoke_cuda checks: FAILED"
  tail -20 "$out/demo-smoke.log"
fi

rc_all=0
first="$(echo $seeds | cut -d' ' -f1)"
: >"$out/demo-runs.log"
rm -f "$out/summary.csv" "$out/demo-results.tar.gz"
for s in $seeds; do
  stamp "default comparison, --device cuda, seed $s"
  # shellcheck disable=SC2086
  timeout "$(budget 240 20)" "$demo" --device cuda --seed "$s" $steps --data "$data" --out "$build/seed$s" \
    >"$build/seed$s.log" 2>&1
  rc=$?
  { echo "===== seed $s (exit $rc)"; cat "$build/seed$s.log"; } >>"$out/demo-runs.log"
  [ $rc = 0 ] || { rc_all=$rc; tail -20 "$build/seed$s.log"; }
  if [ -f "$build/seed$s/summary.csv" ]; then
    [ -f "$out/summary.csv" ] || sed -n '1s/^/seed,/p' "$build/seed$s/summary.csv" >"$out/summary.csv"
    sed -n "2,\$s/^/$s,/p" "$build/seed$s/summary.csv" >>"$out/summary.csv"
  fi
  [ "$s" = "$first" ] && cp "$build/seed$s/steps.csv" "$out/steps-seed$s.csv" 2>/dev/null
done
if [ -n "$suite" ]; then
  stamp "benchmark suite, --device cuda: $suite"
  # shellcheck disable=SC2086
  timeout "$(budget 540 20)" "$demo" --device cuda $suite --data "$data" --out "$build/suite" \
    >"$out/suite-table.txt" 2>"$build/suite.log"
  rc=$?
  [ $rc = 0 ] || { rc_all=$rc; tail -20 "$build/suite.log"; }
  tail -5 "$build/suite.log" >>"$out/suite-table.txt"
  cp "$build/suite/results.csv" "$out/suite-results.csv" 2>/dev/null
  cat "$out/suite-table.txt"
fi
dirs=()
for d in smoke suite/summary.csv $(for s in $seeds; do echo "seed$s"; done); do [ -e "$build/$d" ] && dirs+=("$d"); done
[ ${#dirs[@]} -gt 0 ] && tar -czf "$out/demo-results.tar.gz" -C "$build" "${dirs[@]}"

stamp "tables"
for s in $seeds; do
  echo "--- seed $s ($(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
  sed -n '/^controller /,/^(val/p' "$build/seed$s.log"
done
exit $rc_all
