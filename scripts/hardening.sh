#!/usr/bin/env bash
# Hardening checks (docs/algorithm.md, State and bad input: a clear
# error, never a crash):
#   1. the host unit tests and the fuzz seed corpora under ASan + UBSan
#      (-DGNMR_SANITIZE=ON, a separate build directory);
#   2. the libFuzzer targets (fuzz/, Clang) for a bounded time each.
#
#   bash scripts/hardening.sh
#
# Environment:
#   GNMR_HARDENING=0        do nothing (e.g. a quick local scripts/test.sh)
#   GNMR_FUZZ_SECONDS=N     libFuzzer time per target (default 30; 0 = skip step 2)
#   SAN_BUILD_DIR, FUZZ_BUILD_DIR   build directories (build-sanitize, build-fuzz)
#   GNMR_SAN_CXX            compiler of the sanitizer build (default: CMake's
#                           choice; scripts/test.sh passes clang++); a clang++
#                           one builds the fuzzers too (FUZZ_BUILD_DIR unused)
#   GNMR_SAN_LABELS         CTest labels run under the sanitizers
#                           (default '^(unit|fuzz)$'; test.sh adds soak)
# Needs: g++ (or any compiler with ASan/UBSan), clang++ with libFuzzer
# (Debian: clang libclang-rt-14-dev; scripts/install-deps.sh installs them).
# A fuzzer finding stops the script with the input saved under
# <fuzz build>/artifacts/<target>/ (reproduce: <target> <file>): $SAN_BUILD_DIR
# when it built the fuzzers, else $FUZZ_BUILD_DIR.
set -euo pipefail

if [ "${GNMR_HARDENING:-1}" = "0" ]; then
  echo "hardening: skipped (GNMR_HARDENING=0)"
  exit 0
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
san="${SAN_BUILD_DIR:-build-sanitize}"
fuzz="${FUZZ_BUILD_DIR:-build-fuzz}"
secs="${GNMR_FUZZ_SECONDS:-30}"
jobs="$(nproc 2>/dev/null || echo 2)"
targets=(fuzz_trace fuzz_state_blob)

# Only what the checks need: no CUDA, benchmarks, examples or tools.
common=(-DCMAKE_BUILD_TYPE=Release -DGNMR_BUILD_TESTS=ON -DGNMR_BUILD_CUDA=OFF
        -DGNMR_BUILD_BENCH=OFF -DGNMR_BUILD_EXAMPLES=OFF -DGNMR_BUILD_TOOLS=OFF)
gen() { [ -f "$1/CMakeCache.txt" ] || echo "-G Ninja"; }

# --- 1. ASan + UBSan ----------------------------------------------------------
echo "hardening: ASan+UBSan build in $san"
# -O1: sanitizer builds compile much faster than -O3 and still inline enough.
# shellcheck disable=SC2046
san_cxx=()
[ -n "${GNMR_SAN_CXX:-}" ] && san_cxx=(-DCMAKE_CXX_COMPILER="$GNMR_SAN_CXX")
# A clang++ sanitizer build builds the libFuzzer targets too (they are ASan +
# UBSan already): one configure and one build instead of two, the fuzzers
# at this build's -O1 (fewer executions in the same seconds than -O3).
san_fuzz=()
case "$(basename "${GNMR_SAN_CXX:-none}")" in
  clang++*) [ "$secs" = "0" ] || { san_fuzz=(-DGNMR_BUILD_FUZZERS=ON); fuzz="$san"; } ;;
esac
# MPI off: its tests are not run here, and Open MPI's wrappers need not
# match the sanitizer build's compiler.
cmake -S . -B "$san" $(gen "$san") "${common[@]}" "${san_cxx[@]}" "${san_fuzz[@]}" -DGNMR_SANITIZE=ON \
  -DGNMR_BUILD_DEMO=OFF -DGNMR_WITH_MPI=OFF -DGNMR_WITH_NCCL=OFF \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1"
extra=()
[ "$fuzz" = "$san" ] && extra=("${targets[@]}")
cmake --build "$san" -j"$jobs" --target gnmr_tests "${targets[@]/%/_replay}" "${extra[@]}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --test-dir "$san" --output-on-failure -j2 -L "${GNMR_SAN_LABELS:-^(unit|fuzz)\$}"

# --- 2. libFuzzer -------------------------------------------------------------
if [ "$secs" = "0" ]; then
  echo "hardening: fuzzing skipped (GNMR_FUZZ_SECONDS=0)"
  exit 0
fi
cxx="${GNMR_FUZZ_CXX:-}"
[ "$fuzz" = "$san" ] && cxx="$GNMR_SAN_CXX"  # the fuzzers come from the sanitizer build
if [ -z "$cxx" ]; then
  for c in clang++ clang++-14 clang++-15 clang++-16 clang++-17 clang++-18; do
    if command -v "$c" >/dev/null 2>&1; then cxx="$c"; break; fi
  done
fi
if [ -z "$cxx" ]; then
  echo "hardening: no clang++ for libFuzzer (Debian: apt-get install clang libclang-rt-14-dev)," \
       "or set GNMR_FUZZ_SECONDS=0 to skip fuzzing" >&2
  exit 1
fi
if [ "$fuzz" = "$san" ]; then
  echo "hardening: libFuzzer targets from the sanitizer build ($GNMR_SAN_CXX), ${secs}s per target"
else
  echo "hardening: libFuzzer build in $fuzz ($cxx), ${secs}s per target"
  # shellcheck disable=SC2046
  cmake -S . -B "$fuzz" $(gen "$fuzz") "${common[@]}" -DGNMR_BUILD_FUZZERS=ON \
    -DCMAKE_CXX_COMPILER="$cxx"
  cmake --build "$fuzz" -j"$jobs" --target "${targets[@]}"
fi
for t in "${targets[@]}"; do
  work="$fuzz/corpus/$t"     # grows across runs; the seeds stay untouched
  art="$fuzz/artifacts/$t"
  mkdir -p "$work" "$art"
  echo "hardening: fuzzing $t for ${secs}s"
  if ! "$fuzz/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
       -print_final_stats=1 -artifact_prefix="$art/" "$work" "fuzz/corpus/$t" \
       >"$fuzz/$t.log" 2>&1; then
    tail -n 40 "$fuzz/$t.log" >&2
    echo "hardening: $t found a problem; input saved in $art/ (reproduce: $fuzz/fuzz/$t FILE)" >&2
    exit 1
  fi
  grep -E '^(Done|stat::number_of_executed_units|stat::new_units_added)' "$fuzz/$t.log" || true
done
echo "hardening: all checks passed"
