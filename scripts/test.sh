#!/usr/bin/env bash
# Build gnmr and run every test: the whole CTest suite (unit, packaging, tools,
# MPI, demo; the CUDA tests build when nvcc is found and skip without a GPU),
# then scripts/hardening.sh (ASan+UBSan, libFuzzer).
#
#   bash scripts/test.sh
#
# Environment: BUILD_DIR (default: build), GNMR_CMAKE_ARGS (extra configure
# arguments, e.g. "-DGNMR_SANITIZE=ON"), GNMR_EXTRA_DEPS (extra Debian
# packages for install-deps.sh), GNMR_HARDENING=0 (skip the hardening pass).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-build}"

# shellcheck disable=SC2086  # word splitting of the lists is intended
bash scripts/install-deps.sh ${GNMR_EXTRA_DEPS:-}

# The generator can only be chosen on the first configure of a build dir.
gen=()
[ -f "$build/CMakeCache.txt" ] || gen=(-G Ninja)

# shellcheck disable=SC2086
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release ${GNMR_CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j2

# Every test includes the hardening checks: the host tests again under
# ASan+UBSan and bounded libFuzzer runs (GNMR_HARDENING=0 skips them).
bash scripts/hardening.sh
