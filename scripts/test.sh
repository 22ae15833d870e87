#!/usr/bin/env bash
# Runs every test (GoogleTest via CTest) against ../shared/golden: rebuilds
# incrementally first, then the hardening checks (scripts/hardening.sh,
# docs/hardening.md: ASan+UBSan unit/golden tests and short fuzz runs), which
# CI runs every time. MAGI2_HARDENING=0 skips them for a quick local run.
# set -e: a failed build or CTest run ends the script there, before the
# hardening checks (bash scripts/hardening.sh runs them alone).
# Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The golden fixtures (official-code outputs, README "Build and test") sit beside the clone or where MAGI2_GOLDEN_DIR says.
golden="${MAGI2_GOLDEN_DIR:-../shared/golden}"
if [ ! -d "$golden/dit_tiny" ]; then
  echo "test.sh: no golden fixtures at '$golden' (expected $golden/dit_tiny): clone next to the shared/ folder," \
       "or set MAGI2_GOLDEN_DIR to its golden/ folder" >&2
  exit 2
fi
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
if [ "${MAGI2_HARDENING:-1}" != 0 ]; then
  bash scripts/hardening.sh
fi
