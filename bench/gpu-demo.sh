#!/usr/bin/env bash
# bench/gpu-demo.sh — gnmr-demo on the GPU machine (issue: the training demo),
# in ONE call of the device tool, kept under its 10-minute limit:
#
#   here, once:  bash bench/gpu-demo.sh --stage     copies the fortunes text into
#                                                 .fortunes/ (in .gitignore): the GPU
#                                                 machine has no fortunes package
#   device run:  bash bench/gpu-demo.sh             (carry: [".fortunes"])
#                bash bench/gpu-demo.sh --seeds "1" --steps 100   a shorter run
#
# Builds gnmr-demo against the libtorch inside python3's PyTorch (CUDA) with
# the demo's CUDA step (gnmr's NormPlan, device controller and fused AdamW),
# runs a 5-step smoke on --device cuda with a global preset, the ladder and
# GNMR, then the default comparison (every controller, default stress) for
# each seed. Each seed's summary.csv and steps.csv come back through $OUT
# (or build-gpu-demo/out); the tables are printed last.
set -uo pipefail

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
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --steps) steps="--steps $2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
build=build-gpu-demo
out="${OUT:-$root/$build/out}"
mkdir -p "$out" "$build"
data=.fortunes
[ -d "$data" ] || data=/usr/share/games/fortunes
t0=$SECONDS
stamp() { echo "== [$(date +%T) +$((SECONDS - t0))s] $*"; }

stamp "machine"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null
[ -n "$prefix" ] || { echo "no python3 torch here: nothing to build against"; exit 1; }

stamp "configure (Torch from $prefix)"
gen=()
command -v ninja >/dev/null 2>&1 && [ ! -f "$build/CMakeCache.txt" ] && gen=(-G Ninja)
if ! cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DGNMR_BUILD_CUDA=ON -DGNMR_BUILD_DEMO=ON -DGNMR_BUILD_TESTS=OFF \
  -DGNMR_BUILD_BENCH=OFF -DGNMR_BUILD_EXAMPLES=OFF -DGNMR_BUILD_TOOLS=OFF -DGNMR_WITH_MPI=OFF \
  -DGNMR_WITH_NCCL=OFF -DGNMR_INSTALL=OFF >"$out/demo-configure.log" 2>&1; then
  tail -40 "$out/demo-configure.log"
  exit 1
fi
stamp "build gnmr-demo"
if ! cmake --build "$build" --target gnmr-demo -j"$(nproc)" >"$out/demo-build.log" 2>&1; then
  grep -E "error|undefined" "$out/demo-build.log" | head -40
  exit 1
fi
demo="$build/demo/gnmr-demo"

stamp "smoke: 5 steps on --device cuda"
if ! timeout 120 "$demo" --device cuda --steps 5 --layers 1 --width 32 --fault-rate 0.5 \
  --controllers none,clip,skip-step,gnmr-ladder,gnmr --data "$data" --out "$build/smoke" >"$out/demo-smoke.log" 2>&1; then
  cat "$out/demo-smoke.log"
  echo "smoke FAILED"
  exit 1
fi
tail -12 "$out/demo-smoke.log"

rc_all=0
for s in $seeds; do
  stamp "default comparison, --device cuda, seed $s"
  # shellcheck disable=SC2086
  timeout 240 "$demo" --device cuda --seed "$s" $steps --data "$data" --out "$build/seed$s" \
    >"$out/demo-seed$s.log" 2>&1
  rc=$?
  [ $rc = 0 ] || { rc_all=$rc; tail -20 "$out/demo-seed$s.log"; }
  cp "$build/seed$s/summary.csv" "$out/summary-seed$s.csv" 2>/dev/null
  [ "$s" = "$(echo $seeds | cut -d' ' -f1)" ] && cp "$build/seed$s/steps.csv" "$out/steps-seed$s.csv" 2>/dev/null
done

stamp "tables"
for s in $seeds; do
  echo "--- seed $s ($(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
  sed -n '/^controller /,/^(val/p' "$out/demo-seed$s.log"
done
exit $rc_all
