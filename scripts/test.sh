#!/usr/bin/env bash
# Runs every test (GoogleTest via CTest) against ../shared/golden.
# Rebuilds incrementally first, then runs the hardening checks (ASan+UBSan
# unit/golden tests, short fuzz runs: scripts/hardening.sh) unless
# MAGI2_HARDENING=0. Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
if [ "${MAGI2_HARDENING:-1}" != 0 ]; then
  bash scripts/hardening.sh
fi
