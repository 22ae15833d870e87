#!/usr/bin/env bash
# The hardening checks CI runs after the regular tests (docs/hardening.md):
#   1. an ASan + UBSan build (clang, CPU only) of the unit and golden tests,
#      run with CTest (any sanitizer report fails the test);
#   2. each libFuzzer harness of tests/fuzz/ for a short fixed budget on its
#      checked-in seed corpus (tests/fuzz/corpus/<name>/).
# Usage: bash scripts/hardening.sh [fuzz|tests]   (no argument: both)
# Environment: MAGI2_FUZZ_SECONDS (default 20) per harness; MAGI2_ASAN_BUILD
# (default build-asan) the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
build=${MAGI2_ASAN_BUILD:-build-asan}
seconds=${MAGI2_FUZZ_SECONDS:-20}
jobs=$(nproc)

if ! command -v clang++ >/dev/null; then
  echo "hardening: clang++ not found (scripts/setup.sh installs it)" >&2
  exit 1
fi
t0=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-gline-tables-only" -DMAGI2_CUDA=OFF -DMAGI2_FUZZ=ON \
  -DMAGI2_TEST_DIRS="unit;golden" >/dev/null
cmake --build "$build" -j"$jobs"
t1=$(date +%s)
echo "hardening: sanitizer build took $((t1 - t0)) s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [ "$what" = all ] || [ "$what" = tests ]; then
  ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 900
  t2=$(date +%s)
  echo "hardening: ASan+UBSan unit/golden tests took $((t2 - t1)) s"
fi

if [ "$what" = all ] || [ "$what" = fuzz ]; then
  t2=$(date +%s)
  artifacts="$build/fuzz-artifacts"
  mkdir -p "$artifacts"
  for fuzzer in "$build"/tests/fuzz_*; do
    name=$(basename "$fuzzer")
    corpus="tests/fuzz/corpus/${name#fuzz_}"
    [ -d "$corpus" ] || { echo "hardening: no seed corpus $corpus" >&2; exit 1; }
    # New inputs go to a scratch folder: the checked-in corpus stays as it is.
    work=$(mktemp -d)
    echo "hardening: $name for ${seconds} s on $corpus"
    if ! "$fuzzer" -max_total_time="$seconds" -seed=1 -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=1024 \
        -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "$work" "$corpus" >"$artifacts/$name.log" 2>&1; then
      tail -n 60 "$artifacts/$name.log" >&2
      echo "hardening: $name found a crash (reproducer in $artifacts/)" >&2
      rm -rf "$work"
      exit 1
    fi
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$artifacts/$name.log" | tr '\n' ' '
    echo
    rm -rf "$work"
  done
  t3=$(date +%s)
  echo "hardening: fuzzing took $((t3 - t2)) s"
fi
