# bench/gpu-common.sh — what bench/gpu.sh and bench/gpu-demo.sh share,
# sourced by both: a timestamped step banner, the time budget that keeps a
# whole run under ten minutes, and nvcc on PATH.

t0=$SECONDS
stamp() { echo "== [$(date +%T) +$((SECONDS - t0))s] $*"; }
# The whole run fits in GNMR_GPU_DEADLINE seconds (default 570, under ten
# minutes, so that a batch system's 10-minute job limit never cuts it): each
# step's timeout leaves room for the steps after it (reserve), so logs and
# tables are always written. A larger value gives slow steps more time.
deadline="${GNMR_GPU_DEADLINE:-570}"
budget() {  # budget CAP RESERVE -> seconds this step may take
  local left=$((deadline - (SECONDS - t0) - $2))
  [ "$left" -gt "$1" ] && left=$1
  [ "$left" -lt 5 ] && left=5
  echo "$left"
}

# nvcc may be installed but not on PATH (CMake and nvcc --version need it).
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
