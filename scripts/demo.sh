#!/usr/bin/env bash
# Build gnmr and run its main demo, gnmr-demo: a few minutes of low-precision
# CPU training under every controller preset (docs/demo.md).
#
#   bash scripts/demo.sh
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
./demo/gnmr-demo
