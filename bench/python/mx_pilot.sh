#!/usr/bin/env bash
# bench/python/mx_pilot.sh — the MX proxy's pilot on this project's CPU
# machines (docs/record/mx-proxy.md, "The CPU pilot"): the queue of runs the
# issue orders, one run at a time on one thread under nice, each resumable.
# Start one copy per core you give it; each copy takes the next run that no
# other copy holds:
#
#   setsid nohup bash bench/python/mx_pilot.sh [--out build/mx-cpu] >> build/mx-cpu/queue.log 2>&1 < /dev/null &
#   bash bench/python/mx_pilot.sh --status          # where it stands
#
# --points NAME[,NAME...] keeps a copy to the pilot's runs at those points
# (e.g. the second core on a cheaper point while the first runs a long one);
# such a copy stops after them and leaves step 4 to a copy without --points.
#
# Calling it again resumes the queue: a finished run (its row in
# DIR/POINT/results.csv or in the record, docs/data/mx-pilot.csv) is not run
# again; an interrupted one continues from its checkpoint (DIR/POINT/ckpt/),
# bit for bit. Each run is held by a lock (DIR/locks/POINT--EMULATION--ARM--SEED.lock) while
# a copy runs it; a copy that finds every remaining run held waits for one
# to end (and runs it itself if its holder stopped before finishing). When
# a run ends, its row and its grants go into the record
# (bench/python/mx_record.py sync; again for every point when a copy
# starts), the files to commit: the queue may start again on a fresh clone,
# without build/, and its queue then skips what the record holds.
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
#      the interpreter). default-random reads default's grants: it waits for
#      them.
# (Until 2026-11-29 the width-512 point ran only if no width-256 point
# reproduced; docs/record/mx-proxy.md says why the order changed.)
# Every run fuses its MX quantizer with torch.compile (--compile), which
# mx_sim.use_compiled keeps only where it gives eager's bits.
#
# The interpreter: MX_PILOT_PYTHON, else python/build/venv's, else python3.
# For the tests only: MX_PILOT_POINTS ("NAME|SETTING" entries, one a line)
# replaces the points, MX_PILOT_FLAGS (default --compile) the extra flags.
set -uo pipefail
# The body is one compound command, read whole before it runs: a copy keeps
# running what it started with when this file is edited under it.
{
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="build/mx-cpu"
record="docs/data/mx-pilot.csv"
only=""
status=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --record) record="$2"; shift 2 ;;
    --points) only="$2"; shift 2 ;;
    --status) status=1; shift ;;
    *) echo "unknown argument $1 (bench/python/mx_pilot.sh [--out DIR] [--record FILE] [--points NAME,...] [--status])" >&2; exit 2 ;;
  esac
done
py="${MX_PILOT_PYTHON:-$root/python/build/venv/bin/python}"
[ -x "$py" ] || py=python3
export PYTHONUNBUFFERED=1
w256="--width 256 --batch 2048 --lr 1e-3 --steps 7000"
if [ -n "${MX_PILOT_POINTS:-}" ]; then
  points=()
  while IFS= read -r p; do [ -n "$p" ] && points+=("$p"); done <<<"$MX_PILOT_POINTS"
else
  points=("w256-d4|$w256 --depth 4" "w256-d3|$w256 --depth 3"
          "d512-l3|--width 512 --depth 3 --batch 2048 --lr 5e-4 --steps 11000")
fi
flags="${MX_PILOT_FLAGS---compile}"

if [ "$status" = 1 ]; then
  for d in "$out"/*/; do
    [ -f "$d/results.csv" ] && { echo "== $d"; "$py" bench/python/mx_proxy.py --summary --out "$d"; }
  done
  [ -f "$record" ] && echo "== $record: $(($(wc -l < "$record") - 1)) finished run(s)"
  for l in "$out"/*.log; do  # one log a copy, as the docs start them
    [ -f "$l" ] && { echo "== last lines of $l"; tail -n 3 "$l"; }
  done
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

# A copy of the queue runs at a lower priority, one run at a time.
if [ -z "${MX_PILOT_NICED:-}" ]; then
  export MX_PILOT_NICED=1
  exec nice -n 10 bash "$root/bench/python/mx_pilot.sh" --out "$out" --record "$record" ${only:+--points "$only"}
fi
mkdir -p "$out/locks"
echo "mx_pilot: $(date -u +%FT%TZ) pid $$ on $(hostname), queue in $out, record $record"

# A run of the queue: "POINT EMULATION ARM SEED" (the point's setting looked up).
setting_of() { local p; for p in "${points[@]}"; do [ "${p%%|*}" = "$1" ] && { echo "${p#*|}"; return; }; done; }
lock_of() { echo "$out/locks/$1--$2--$3--$4.lock"; }  # one entry, one lock
# 0: finished; 3: not; anything else (an unreadable record) stops the copy.
is_done() {
  "$py" bench/python/mx_record.py done "$record" "$out/$1" "$1" "$2" "$3" "$4"
  local rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "mx_pilot: the record $record cannot be read" >&2; exit 1; }
  return "$rc"
}
sync_point() { "$py" bench/python/mx_record.py sync "$record" "$out/$1" "$1" || exit 1; }

# Runs one entry unless it is finished; 75 if another copy holds it.
try_run() {
  local point="$1" emu="$2" arm="$3" seed="$4" lock
  is_done "$@" && return 0
  lock="$(lock_of "$@")"
  (
    flock -n 9 || exit 75
    is_done "$point" "$emu" "$arm" "$seed" && exit 0  # finished while we looked
    echo "mx_pilot: $(date -u +%FT%TZ) pid $$ $out/$point --emulation $emu --arms $arm --seeds $seed $(setting_of "$point")"
    # shellcheck disable=SC2046,SC2086
    "$py" bench/python/mx_proxy.py --device cpu --jobs 1 --threads 1 --ckpt-every 250 --resume $flags \
      --emulation "$emu" --arms "$arm" --seeds "$seed" --out "$out/$point" $(setting_of "$point") || exit 1
    sync_point "$point"
  ) 9>"$lock"
}

# Runs a list of entries to the end: a pass runs every free unfinished one;
# if some were held by other copies, it waits for the first of them to be
# released and passes again (so a run whose holder stopped is resumed here).
run_all() {
  local e held rc
  while :; do
    held=""
    for e in "$@"; do
      # shellcheck disable=SC2086
      try_run $e; rc=$?
      if [ "$rc" = 75 ]; then [ -n "$held" ] || held="$e"
      elif [ "$rc" != 0 ]; then exit "$rc"; fi
    done
    [ -z "$held" ] && return 0
    echo "mx_pilot: $(date -u +%FT%TZ) pid $$ waits for another copy's run: $held"
    # shellcheck disable=SC2086
    flock "$(lock_of $held)" true
  done
}

# Whether low diverged and high did not on some seed at POINT under EMULATION.
reproduced() { "$py" bench/python/mx_record.py reproduced "$record" "$out/$1" "$1" "$2"; }

# A run finished (or grants recorded) where a copy died before its sync, and
# recorded grants a fresh clone's folders lack: put right before anything runs.
for p in "${points[@]}"; do mkdir -p "$out/${p%%|*}"; sync_point "${p%%|*}"; done
mine() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
for o in ${only//,/ }; do
  [ -n "$(setting_of "$o")" ] || { echo "mx_pilot: no point $o" >&2; exit 2; }
done
pilot=()
for seed in 1 2; do
  for p in "${points[@]}"; do
    mine "${p%%|*}" || continue
    pilot+=("${p%%|*} paper low $seed" "${p%%|*} paper high $seed")
  done
done
for p in "${points[@]}"; do
  mine "${p%%|*}" && pilot+=("${p%%|*} torchao low 1" "${p%%|*} torchao low 2")
done
run_all "${pilot[@]}"
if [ -n "$only" ]; then
  echo "mx_pilot: $(date -u +%FT%TZ) pid $$ the pilot's runs at $only are done; step 4 is left to a copy without --points"
  exit 0
fi

hit=""
for emu in paper torchao; do
  for p in "${points[@]}"; do
    reproduced "${p%%|*}" "$emu" && { hit="$emu ${p%%|*}"; break 2; }
  done
done
if [ -z "$hit" ]; then
  echo "mx_pilot: $(date -u +%FT%TZ) pid $$ nothing reproduced; the queue is done"
  exit 0
fi
emu="${hit%% *}" name="${hit#* }"
other=torchao; [ "$emu" = torchao ] && other=paper
echo "mx_pilot: $(date -u +%FT%TZ) pid $$ reproduced at $name under --emulation $emu: the protocol's arms"
arms=("$name $emu low 3" "$name $emu high 3")
for a in stabilizer default low-rceil low-ln-high; do
  for s in 1 2 3; do arms+=("$name $emu $a $s"); done
done
run_all "${arms[@]}"
# default-random moves default's grants: only after every default run is finished
run_all "$name $emu default-random 1" "$name $emu default-random 2" "$name $emu default-random 3"
run_all "$name $other low 1" "$name $other low 2" "$name $other low 3"
echo "mx_pilot: $(date -u +%FT%TZ) pid $$ the queue is done"
exit 0
}
