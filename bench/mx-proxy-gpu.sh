#!/usr/bin/env bash
# bench/mx-proxy-gpu.sh — the MX divergence of Su et al. 2025 (arXiv
# 2506.20752) reproduced on one GPU, and gnmr against it, in one command on
# a machine with a CUDA GPU, a CUDA build of torch and nvcc
# (docs/record/mx-proxy.md has the protocol and the results):
#
#   bash bench/mx-proxy-gpu.sh [--out DIR] [--seeds 1-2] [--jobs 4] [--budget 480] [--emulation E]
#
# --emulation torchao (default: torchao's bits, MX hardware's) or paper (the
# authors' own emulator's bits: bench/python/mx_paper.py); both can share
# one DIR (high, the same run under either, runs once).
# 1. builds the gnmr Python package with CUDA (tests/python/gpu.sh --build-only);
# 2. the pilot: `low` and `high` at the paper's main setting (D 512, L 4,
#    batch 2048, lr 6e-4, 9,000 steps) on every seed, in parallel processes;
# 3. where `low` diverged and `high` did not: `stabilizer`, `default`, and
#    the paper's static fixes `low-rceil`, `low-ln-high`, then
#    `default-random` (it reads default's grants), on those seeds;
#    where no seed diverged: the paper's second setting (L 3, lr 5e-4,
#    11,000 steps) is piloted instead, and the arms run there if it diverges.
# Nothing of gnmr is tuned here: the default as shipped.
# Every phase runs under what is left of --budget seconds (default 480: a
# session with a time limit on the GPU); a run cut by it is not recorded,
# and calling the script again resumes: finished runs (DIR/*/results.csv)
# are not re-run, a cut one continues from its last checkpoint
# (DIR/*/ckpt/, every 500 steps). DIR/mx-proxy.tgz holds the results,
# traces and grants (not the checkpoints): the one file to copy back from
# a remote GPU machine.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="build-gpu-mx"
seeds="1-2"
jobs=4
budget=480
emulation=torchao
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --emulation) emulation="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }

bash tests/python/gpu.sh --build-only --out "$out/build" || exit 1
export PYTHONPATH="$root/build-gpu-python/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py=python3
proxy() {  # proxy DIR ARMS SETTING...
  local dir="$1" arms="$2"; shift 2
  local s; s=$(left)
  [ "$s" -gt 30 ] || { echo "mx-proxy-gpu: no time left for $arms in $dir"; return 1; }
  timeout "$s" "$py" bench/python/mx_proxy.py --device cuda --compile --jobs "$jobs" --seeds "$seeds" \
    --emulation "$emulation" --resume --ckpt-every 500 --arms "$arms" --out "$dir" "$@"
}
# Which seeds `low` (under --emulation) diverged on while `high` did not (a comma list, or empty).
diverging() {
  "$py" - "$1/results.csv" "$emulation" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]))) if __import__("os").path.exists(sys.argv[1]) else []
d = {(r["arm"], r["emulation"], r["seed"]): r["diverged_at"] for r in rows}
print(",".join(sorted({s for a, e, s in d if a == "low" and e == sys.argv[2] and d[(a, e, s)]
                       and not d.get(("high", "none", s), "x")}, key=int)))
PY
}
run_setting() {  # run_setting DIR SETTING...
  local dir="$1"; shift
  proxy "$dir" low,high "$@"
  local div; div=$(diverging "$dir")
  echo "mx-proxy-gpu: $dir: low diverged and high did not on seeds [${div}]"
  [ -n "$div" ] || return 3
  seeds="$div" proxy "$dir" stabilizer,default,low-rceil,low-ln-high,default-random "$@"
}
main="--width 512 --depth 4 --batch 2048 --lr 6e-4 --steps 9000"
second="--width 512 --depth 3 --batch 2048 --lr 5e-4 --steps 11000"
# shellcheck disable=SC2086
run_setting "$out/main" $main
rc=$?
if [ "$rc" = 3 ]; then
  # shellcheck disable=SC2086
  run_setting "$out/second" $second
  rc=$?
fi
for d in "$out"/main "$out"/second; do
  [ -f "$d/results.csv" ] && { echo "== $d"; "$py" bench/python/mx_proxy.py --summary --out "$d"; }
done
# shellcheck disable=SC2046
tar czf "$out/mx-proxy.tgz" --exclude=ckpt -C "$out" $(cd "$out" && ls -d main second 2>/dev/null) 2>/dev/null
echo "mx-proxy-gpu: $(( $(date +%s) - t0 )) s; results in $out/mx-proxy.tgz"
exit "$rc"
