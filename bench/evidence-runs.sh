#!/usr/bin/env bash
# bench/evidence-runs.sh — the runs behind docs/evidence.md's figures of the
# default as it ships: the verdict (four demo scenarios, seeds 341-380, and
# the Hugging Face Llama stack, seeds 3041-3080), the false-alarm table
# (demo seeds 306-310 and five Hugging Face families at seeds 3006-3010,
# three recipes each) and the 10,000-step run (demo, seed 302).
#
#     setsid nohup bash bench/evidence-runs.sh [OUT] > LOG 2>&1 < /dev/null &   (default OUT: build/evidence;
#     setsid: its own scheduling group, lowered below)
#
# Resumable and idempotent: gnmr-demo keeps a run cache (OUT/.../runs/) and
# trainer_stability.py skips the runs already in its results.csv, so an
# interrupted queue started again runs only what is missing. Each step's
# wall time goes to OUT/times.log. Then
#
#     python3 bench/python/evidence.py --collect OUT --data docs/data/evidence
#     python3 bench/python/evidence.py --write docs/evidence.md
#
# copies the per-seed rows of every complete set into docs/data/evidence/
# (a set not complete yet is left out) and rewrites the page's marked
# figures from them. Environment: JOBS (default 1), NICE (default 10),
# DEMO (default build/demo/gnmr-demo), PY (default python/build/venv/bin/python),
# PARTS (default "verdict hf fa-demo fa-hf long": which parts to run, in order).
set -u
cd "$(dirname "$0")/.."
OUT=${1:-build/evidence}
JOBS=${JOBS:-1}
NICE=${NICE:-10}
# Under setsid the queue is its own scheduling autogroup, which nice(1)
# alone does not lower against other sessions: lower the group itself
# (Linux; silently skipped elsewhere), only when this script leads its own
# session (otherwise the group is the caller's terminal's, builds and all).
if [ "$(ps -o sid= -p $$ 2>/dev/null | tr -d ' ')" = "$$" ]; then
  echo "$NICE" > /proc/self/autogroup 2>/dev/null || true
fi
DEMO=${DEMO:-build/demo/gnmr-demo}
PY=${PY:-python/build/venv/bin/python}
TS=bench/python/trainer_stability.py
PARTS=" ${PARTS:-verdict hf fa-demo fa-hf long} "
mkdir -p "$OUT"
want() { [[ "$PARTS" == *" $1 "* ]]; }

log() { echo "[$(date -u +%Y-%m-%dT%H:%M:%SZ)] $*" | tee -a "$OUT/times.log"; }

step() {  # step NAME COMMAND...: run it niced, log its wall time and status
  local name=$1 t0 rc
  shift
  log "start $name: $*"
  t0=$(date +%s)
  nice -n "$NICE" "$@"
  rc=$?
  log "end   $name: rc $rc, $(( $(date +%s) - t0 )) s"
  return 0
}

# The recipes of the false-alarm table: name lr warm-up steps.
RECIPES="base:3e-3:20:200 short:1e-3:5:200 long:6e-3:100:1000"

# a. the verdict: four demo scenarios (detection comes from operator-outliers).
want verdict && for S in operator-outliers grad-faults lr-burst fp4-gradients; do
  step "verdict-$S" "$DEMO" --scenario "$S" --arms stabilizer,default --seeds 381-420 \
    --jobs "$JOBS" --out "$OUT/verdict-$S"
done

# b. the Hugging Face row (Llama, torchao float8, the outlier stressor).
want hf && step hf-llama "$PY" $TS --model llama --arms stabilizer,default --seeds 3041-3080 \
  --jobs "$JOBS" --out "$OUT/hf-llama"

# c. false alarms: the demo's clean recipe, then five Hugging Face families
# with the stressor off, at three recipes each.
want fa-demo && for R in $RECIPES; do
  IFS=: read -r name lr wu steps <<<"$R"
  step "fa-demo-$name" "$DEMO" --scenario clean --arms gnmr-calibrated,default --seeds 306-310 \
    --lr "$lr" --warmup "$wu" --steps "$steps" --jobs "$JOBS" --out "$OUT/fa-demo-$name"
done
want fa-hf && for M in llama neox qwen2 opt gemma; do
  for R in $RECIPES; do
    IFS=: read -r name lr wu steps <<<"$R"
    step "fa-$M-$name" "$PY" $TS --model "$M" --per-100 0 --arms gnmr-calibrated,default \
      --seeds 3006-3010 --lr "$lr" --warmup "$wu" --steps "$steps" --jobs "$JOBS" --out "$OUT/fa-$M-$name"
  done
done

# d. the 10,000-step run (the demo's base clean recipe, seed 302).
want long && step long-302 "$DEMO" --scenario clean --arms default --seeds 302 --steps 10000 \
  --jobs "$JOBS" --out "$OUT/long-302"

log "queue done"
