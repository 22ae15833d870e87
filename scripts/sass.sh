#!/usr/bin/env bash
# A kernel's SASS and its instruction mix, from a built object or binary, on a machine without a GPU
# (docs/cuda.md, Profiling): where ptxas put a wgmma wait, how many instructions a loop issues, spills.
#
# Usage: bash scripts/sass.sh FILE [KERNEL_SUBSTRING] [FROM TO]
#   FILE              a .cu.o, a static library or an executable with sm_90a code
#   KERNEL_SUBSTRING  part of the mangled kernel name; without it, lists the kernels and their registers
#   FROM TO           SASS addresses (hex, e.g. 0x3440 0x5f90): the mix of that range only
# Writes the whole SASS to /tmp/sass.<kernel>.txt and prints the opcode counts and each wgmma and wait.
# cuobjdump and nvdisasm come from NVIDIA's pinned PyPI wheels into the git-ignored .deps/cuobjdump on first use.
set -euo pipefail
file=${1:?usage: sass.sh FILE [KERNEL_SUBSTRING] [FROM TO]}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.deps/cuobjdump
bin=$dir/nvidia/cu13/bin/cuobjdump
if [ ! -x "$bin" ] || [ ! -x "$dir/nvidia/cu13/bin/nvdisasm" ]; then  # -sass runs nvdisasm
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$dir/wheel" \
    nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
  for w in "$dir"/wheel/*.whl; do python3 -m zipfile -e "$w" "$dir"; done
  chmod +x "$bin" "$dir/nvidia/cu13/bin/nvdisasm"
fi
export PATH=$dir/nvidia/cu13/bin:$PATH
if [ $# -lt 2 ]; then
  # Registers and STACK (spills and local arrays, bytes) first: the mangled names are long.
  "$bin" -res-usage "$file" | grep -E "Function|REG" | paste - - |
    sed -E 's/^ *Function ([^:]*):.*(REG:[0-9]+) (STACK:[0-9]+) SHARED:[0-9]+ (LOCAL:[0-9]+).*/\2 \3 \4 \1/' | cut -c1-160
  exit 0
fi
name=$("$bin" -sass "$file" | awk '/Function :/ {print $3}' | { grep -F -- "$2" || true; } | head -n1)
[ -n "$name" ] || { echo "sass.sh: no kernel matching '$2' in $file" >&2; exit 1; }
out=/tmp/sass.$(echo "$2" | tr -c 'A-Za-z0-9_\n' _).txt
"$bin" -sass -fun "$name" "$file" > "$out"
echo "$name -> $out"
"$bin" -res-usage -fun "$name" "$file" | grep REG || true
python3 - "$out" "${3:-0x0}" "${4:-0xffffffff}" <<'PY'
import collections, re, sys
lo, hi = int(sys.argv[2], 16), int(sys.argv[3], 16)
mix, n = collections.Counter(), 0
for line in open(sys.argv[1]):
    m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\S*)', line)
    if not m or not lo <= int(m.group(1), 16) <= hi:
        continue
    n += 1
    mix[m.group(3)] += 1
    if m.group(3) in ('HGMMA', 'QGMMA', 'WARPGROUP') or (m.group(3) == 'BRA' and m.group(2)):
        print(f"  {m.group(1)} {line.split(';')[0].split('*/', 1)[1].strip()[:90]}")
print(f"{n} instructions:", ", ".join(f"{k} {v}" for k, v in mix.most_common(16)))
PY
