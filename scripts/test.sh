#!/usr/bin/env bash
# Runs every test (GoogleTest via CTest) against ../shared/golden.
# Rebuilds incrementally first. Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
