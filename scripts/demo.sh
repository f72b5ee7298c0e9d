#!/usr/bin/env bash
# Build gnmr and run its main demo: gnmr-demo's headline comparison from the
# stability benchmark (docs/record/stability.md) — low-precision training of a small
# transformer with activation outliers injected into one operator at a time,
# under the recipe alone (low), in full precision (high), with GNMR promoting
# the operators it flags (gnmr-promote, and the preset gnmr) or only
# clipping them (gnmr-clip), and with the same promotions at random operators
# (random-at-triggers) or on a fixed list of the last layers (fixed-list),
# Stable-SPAM's normalisation (stabilizer) and GNMR's promotion inside it
# (stabilizer+gnmr-promote, the library's layered controller) against the
# same share of random promotions inside it (stabilizer+random), and the
# library's default preset (the stabilizer with GNMR's calibrated promotion
# inside it) against its own share of random promotions (default-random);
# development seeds 1-3, every run in its own process, two at a time on two
# cores. Prints the table; writes build/gnmr-demo-out/ (results.csv,
# summary.csv, operator-outliers.png and the run cache).
#
#   bash scripts/demo.sh                 the headline comparison (~3.5 min on 2 idle cores)
#   bash scripts/demo.sh ARGS...         gnmr-demo ARGS... instead, e.g. the original
#                                        comparison: bash scripts/demo.sh --controllers none,clip,gnmr
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-build}"

bash scripts/install-deps.sh

gen=()
[ -f "$build/CMakeCache.txt" ] || gen=(-G Ninja)

cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGNMR_BUILD_DEMO=ON
cmake --build "$build" -j"$(nproc)" --target gnmr-demo
# From inside the build dir, so its output (gnmr-demo-out/) stays out of the
# source tree.
cd "$build"
if [ $# -gt 0 ]; then
  exec ./demo/gnmr-demo "$@"
fi
exec ./demo/gnmr-demo --scenario operator-outliers \
  --arms low,high,gnmr,gnmr-promote,gnmr-clip,random-at-triggers,fixed-list,stabilizer,stabilizer+gnmr-promote,stabilizer+random,default,default-random \
  --seeds 1-3 --jobs "$(nproc)" --out gnmr-demo-out
