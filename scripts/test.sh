#!/usr/bin/env bash
# Build gnmr and run every test: the whole CTest suite (unit, packaging, tools,
# MPI, demo, header checks; the CUDA tests build when nvcc is found and skip
# without a GPU), then the host unit and soak tests built with clang++ as
# well, then scripts/hardening.sh (ASan+UBSan, libFuzzer). With hardening on
# (the default) the clang++ pass *is* the sanitizer build: one clang++ build
# of the unit tests under ASan+UBSan runs the unit, soak and fuzz-corpus
# tests, instead of a clang++ Release build and a g++ sanitizer build of the
# same tests (the second build cost CI about four minutes and found nothing
# the first could not: the same sources, the same warnings as errors).
# Each phase prints how long it took.
#
#   bash scripts/test.sh
#
# Environment: BUILD_DIR (default: build), GNMR_CMAKE_ARGS (extra configure
# arguments, e.g. "-DGNMR_SANITIZE=ON"), GNMR_EXTRA_DEPS (extra Debian
# packages for install-deps.sh), GNMR_CLANG=0 (no clang++ pass: the sanitizer
# build then uses the default compiler), CLANG_BUILD_DIR (default:
# build-clang; only with GNMR_HARDENING=0), GNMR_HARDENING=0 (skip the
# hardening pass).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-build}"
t0=$SECONDS
phase() { echo "test.sh: $1 took $((SECONDS - t0)) s"; t0=$SECONDS; }

# shellcheck disable=SC2086  # word splitting of the lists is intended
bash scripts/install-deps.sh ${GNMR_EXTRA_DEPS:-}
phase "installing the dependencies"

# The generator can only be chosen on the first configure of a build dir.
gen=()
[ -f "$build/CMakeCache.txt" ] || gen=(-G Ninja)

# Without a GPU the CUDA targets are compile checks (their tests skip): their
# host code is compiled without optimization, about a third less nvcc time
# (gcc's -O3 was half of it); device code keeps ptxas's default -O3. With a
# GPU (nvidia-smi lists one), CMake's Release flags, so that what runs there
# is what users build.
if nvidia-smi -L >/dev/null 2>&1; then
  cuda_flags=(-DCMAKE_CUDA_FLAGS_RELEASE="-O3 -DNDEBUG")
else
  cuda_flags=(-DCMAKE_CUDA_FLAGS_RELEASE="-DNDEBUG")
fi
# shellcheck disable=SC2086
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda_flags[@]}" ${GNMR_CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)"
phase "the build"
ctest --test-dir "$build" --output-on-failure -j2
phase "CTest"

# The host unit tests again, built by clang++ (many framework teams build
# with it, and it warns where g++ does not). Only the unit test executable:
# the header check above already compiles every public header with both
# compilers, and the demo, CUDA, benchmarks and tools add nothing here.
clang=""
if [ "${GNMR_CLANG:-1}" != "0" ]; then
  clang="$(command -v clang++ || true)"
  if [ -z "$clang" ]; then
    echo "test.sh: no clang++ (Debian: apt-get install clang), or set GNMR_CLANG=0" >&2
    exit 1
  fi
fi
if [ -n "$clang" ] && [ "${GNMR_HARDENING:-1}" = "0" ]; then
  cbuild="${CLANG_BUILD_DIR:-build-clang}"
  cgen=()
  [ -f "$cbuild/CMakeCache.txt" ] || cgen=(-G Ninja)
  cmake -S . -B "$cbuild" "${cgen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$clang" \
    -DGNMR_BUILD_TESTS=ON -DGNMR_BUILD_CUDA=OFF -DGNMR_BUILD_BENCH=OFF -DGNMR_BUILD_EXAMPLES=OFF \
    -DGNMR_BUILD_TOOLS=OFF -DGNMR_BUILD_DEMO=OFF -DGNMR_WITH_MPI=OFF -DGNMR_WITH_NCCL=OFF
  cmake --build "$cbuild" -j"$(nproc)" --target gnmr_tests
  ctest --test-dir "$cbuild" --output-on-failure -j2 -L '^(unit|soak)$'
  phase "the clang++ pass"
fi

# Every test includes the hardening checks: the host tests again under
# ASan+UBSan (built by clang++ unless GNMR_CLANG=0, the soak tests too) and
# bounded libFuzzer runs (GNMR_HARDENING=0 skips them).
if [ -n "$clang" ]; then
  GNMR_SAN_CXX="$clang" GNMR_SAN_LABELS='^(unit|soak|fuzz)$' bash scripts/hardening.sh
else
  bash scripts/hardening.sh
fi
phase "hardening"
