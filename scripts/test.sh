#!/usr/bin/env bash
# Runs every test (GoogleTest via CTest) against ../shared/golden.
# Rebuilds incrementally first, then (MAGI2_HARDENING=1, the default in CI
# once enabled below) the hardening checks: ASan+UBSan unit/golden tests and
# short fuzz runs (scripts/hardening.sh, docs/hardening.md).
# Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
if [ "${MAGI2_HARDENING:-0}" != 0 ]; then
  bash scripts/hardening.sh
fi
