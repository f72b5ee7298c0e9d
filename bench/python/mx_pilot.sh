#!/usr/bin/env bash
# bench/python/mx_pilot.sh — the MX proxy's pilot on this project's CPU
# machines (docs/record/mx-proxy.md, "The CPU pilot"): the queue of runs the
# issue orders, one run at a time on one thread under nice, each resumable:
#
#   setsid nohup bash bench/python/mx_pilot.sh [--out build/mx-cpu] >> build/mx-cpu/queue.log 2>&1 < /dev/null &
#   bash bench/python/mx_pilot.sh --status          # where it stands
#
# Calling it again resumes the queue: runs in DIR/*/results.csv are not run
# again, an interrupted one continues from its checkpoint (DIR/*/ckpt/), bit
# for bit. A lock (DIR/queue.lock) keeps a second copy from running.
#
# The queue (batch 2048, E4M3 everywhere; one folder per point, both
# emulations in it; high is the same run under either emulation and runs
# once). Points: width 256 at depth 4 and 3 (constant lr 1e-3, 7,000 steps),
# and the authors' second setting, depth 3, width 512, lr 5e-4, 11,000 steps.
#   1. --emulation paper, seed 1: every point, low then high;
#   2. --emulation paper, seed 2: the same;
#   3. --emulation torchao: every point, low only (high is done), seeds 1-2;
#   4. at the first point that reproduced (low diverged and high did not, on
#      a seed; in the order above): low and high on seed 3, then the
#      protocol's arms stabilizer, default, low-rceil, low-ln-high,
#      default-random on seeds 1-3 under that emulation, and low under the
#      other emulation (gnmr's default as shipped; needs the gnmr package in
#      the interpreter).
# (Until 2026-11-29 the width-512 point ran only if no width-256 point
# reproduced; docs/record/mx-proxy.md says why the order changed.)
# Every run fuses its MX quantizer with torch.compile (--compile), which
# mx_sim.use_compiled keeps only where it gives eager's bits.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="build/mx-cpu"
status=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --status) status=1; shift ;;
    *) echo "unknown argument $1 (bench/python/mx_pilot.sh [--out DIR] [--status])" >&2; exit 2 ;;
  esac
done
py="$root/python/build/venv/bin/python"
[ -x "$py" ] || py=python3
export PYTHONUNBUFFERED=1
w256="--width 256 --batch 2048 --lr 1e-3 --steps 7000"
points=("w256-d4|$w256 --depth 4" "w256-d3|$w256 --depth 3"
        "d512-l3|--width 512 --depth 3 --batch 2048 --lr 5e-4 --steps 11000")

if [ "$status" = 1 ]; then
  for d in "$out"/*/; do
    [ -f "$d/results.csv" ] && { echo "== $d"; "$py" bench/python/mx_proxy.py --summary --out "$d"; }
  done
  [ -f "$out/queue.log" ] && { echo "== last lines of $out/queue.log"; tail -n 5 "$out/queue.log"; }
  exit 0
fi

# Started under setsid (as the docs say), the queue is its own scheduling
# autogroup, and nice(1) then weighs it only against itself: a build in
# another session would still get half the cores. The autogroup's own nice
# makes the queue yield to interactive work (Linux; silently skipped
# elsewhere). Only when this script leads its own session: otherwise the
# autogroup is the caller's terminal's, and lowering it would slow every
# build started there.
if [ "$(ps -o sid= -p $$ 2>/dev/null | tr -d ' ')" = "$$" ]; then
  echo 19 > /proc/self/autogroup 2>/dev/null || true
fi

# One core of two is this queue's: a lower priority, and one copy at a time.
if [ -z "${MX_PILOT_NICED:-}" ]; then
  export MX_PILOT_NICED=1
  exec nice -n 10 bash "$0" --out "$out"
fi
mkdir -p "$out"
exec 9>"$out/queue.lock"
flock -n 9 || { echo "mx_pilot: another copy holds $out/queue.lock" >&2; exit 1; }
echo "mx_pilot: $(date -u +%FT%TZ) pid $$ on $(hostname), queue in $out"

proxy() {  # proxy DIR EMULATION ARMS SEEDS SETTING...
  local dir="$1" emu="$2" arms="$3" seeds="$4"; shift 4
  echo "mx_pilot: $(date -u +%FT%TZ) $dir --emulation $emu --arms $arms --seeds $seeds $*"
  "$py" bench/python/mx_proxy.py --device cpu --jobs 1 --threads 1 --ckpt-every 250 --resume --compile \
    --emulation "$emu" --arms "$arms" --seeds "$seeds" --out "$dir" "$@" || exit $?
}
# Whether low diverged and high did not on some seed at DIR under EMULATION.
reproduced() {
  "$py" - "$1/results.csv" "$2" <<'PY'
import csv, os, sys
path, emu = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(path))) if os.path.exists(path) else []
d = {(r["arm"], r["emulation"], r["seed"]): r["diverged_at"] for r in rows}
sys.exit(0 if any(a == "low" and e == emu and v and d.get(("high", "none", s)) == ""
                  for (a, e, s), v in d.items()) else 1)
PY
}

for seed in 1 2; do
  for p in "${points[@]}"; do
    # shellcheck disable=SC2086
    proxy "$out/${p%%|*}" paper low,high "$seed" ${p#*|}
  done
done
for p in "${points[@]}"; do
  # shellcheck disable=SC2086
  proxy "$out/${p%%|*}" torchao low 1-2 ${p#*|}
done

hit=""
for emu in paper torchao; do
  for p in "${points[@]}"; do
    reproduced "$out/${p%%|*}" "$emu" && { hit="$emu|$p"; break 2; }
  done
done
if [ -z "$hit" ]; then
  echo "mx_pilot: $(date -u +%FT%TZ) nothing reproduced; the queue is done"
  exit 0
fi
emu="${hit%%|*}" rest="${hit#*|}"
name="${rest%%|*}" setting="${rest#*|}"
other=torchao; [ "$emu" = torchao ] && other=paper
echo "mx_pilot: $(date -u +%FT%TZ) reproduced at $name under --emulation $emu: the protocol's arms"
# shellcheck disable=SC2086
proxy "$out/$name" "$emu" low,high 3 $setting
# shellcheck disable=SC2086
proxy "$out/$name" "$emu" stabilizer,default,low-rceil,low-ln-high,default-random 1-3 $setting
# shellcheck disable=SC2086
proxy "$out/$name" "$other" low 1-3 $setting
echo "mx_pilot: $(date -u +%FT%TZ) the queue is done"
