#!/usr/bin/env bash
# The hardening checks CI runs after the regular tests, every run
# (docs/hardening.md; scripts/test.sh calls this unless MAGI2_HARDENING=0):
#   1. one clang build (folder build-asan/, CPU only) with ASan + UBSan and
#      libFuzzer coverage of the unit and golden tests and of the harnesses of
#      tests/fuzz/ (target magi2_test_programs: nothing else is built), then
#      CTest over those tests, less the repeats listed in MAGI2_ASAN_EXCLUDE
#      (any sanitizer report fails its test);
#   2. each libFuzzer harness for a short fixed budget on its checked-in seed
#      corpus (tests/fuzz/corpus/<name>/), as many at once as there are cores.
# Usage: bash scripts/hardening.sh [fuzz|tests]   (no argument: both)
# Environment: MAGI2_FUZZ_SECONDS (default 20) per harness; MAGI2_ASAN_BUILD
# (default build-asan) the build folder; MAGI2_ASAN_EXCLUDE a CTest -E regex
# (default: the thread-count and workspace determinism repeats, whose code
# paths the other tests already run under the sanitizers; "" runs all).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
build=${MAGI2_ASAN_BUILD:-build-asan}
seconds=${MAGI2_FUZZ_SECONDS:-20}
exclude=${MAGI2_ASAN_EXCLUDE-SameBytesAcrossThreadCounts|WorkspaceReuseGivesSameBytes|SameBytesForAnyThreadCount|ThreadCountInvariant}
jobs=$(nproc)

if ! command -v clang++ >/dev/null; then
  echo "hardening: clang++ not found (scripts/setup.sh installs it)" >&2
  exit 1
fi
t0=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-gline-tables-only" -DMAGI2_CUDA=OFF -DMAGI2_FUZZ=ON \
  -DMAGI2_TEST_DIRS="unit;golden" >/dev/null
cmake --build "$build" -j"$jobs" --target magi2_test_programs
t1=$(date +%s)
echo "hardening: sanitizer build took $((t1 - t0)) s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [ "$what" = all ] || [ "$what" = tests ]; then
  ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 900 ${exclude:+-E "$exclude"}
  t2=$(date +%s)
  echo "hardening: ASan+UBSan unit/golden tests took $((t2 - t1)) s"
fi

# One harness for $seconds; its log and any reproducer go to $artifacts.
fuzz_one() {
  local fuzzer=$1 name corpus work rc=0
  name=$(basename "$fuzzer")
  corpus="tests/fuzz/corpus/${name#fuzz_}"
  [ -d "$corpus" ] || { echo "hardening: no seed corpus $corpus" >&2; return 1; }
  # New inputs go to a scratch folder: the checked-in corpus stays as it is.
  work=$(mktemp -d)
  "$fuzzer" -max_total_time="$seconds" -seed=1 -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "$work" "$corpus" >"$artifacts/$name.log" 2>&1 || rc=$?
  rm -rf "$work"
  if [ "$rc" != 0 ]; then
    tail -n 60 "$artifacts/$name.log" >&2
    echo "hardening: $name found a crash (reproducer in $artifacts/)" >&2
    return 1
  fi
  echo "hardening: $name ${seconds} s: $(grep -E "stat::number_of_executed_units|stat::peak_rss_mb" \
    "$artifacts/$name.log" | tr -s ' \n' ' ')"
}

if [ "$what" = all ] || [ "$what" = fuzz ]; then
  t2=$(date +%s)
  artifacts="$build/fuzz-artifacts"
  mkdir -p "$artifacts"
  # Each harness is one process on one core: run $jobs at a time.
  pids=() failed=0
  for fuzzer in "$build"/tests/fuzz_*; do
    fuzz_one "$fuzzer" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$jobs" ]; then
      wait "${pids[0]}" || failed=1
      pids=("${pids[@]:1}")
    fi
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  t3=$(date +%s)
  echo "hardening: fuzzing took $((t3 - t2)) s"
  [ "$failed" = 0 ] || exit 1
fi
