#!/usr/bin/env bash
# Device check of the CUDA MoE work (issue 11), run inside a bundle made by
#   bash scripts/cuda_bundle.sh build /work/main/build-bundle-moe \
#     test_cuda_moe_grouped test_cuda_mhc_moe bench_moe test_cuda_backend
#   cp scripts/device_moe.sh /work/main/build-bundle-moe/
# with the device tool: cd build-bundle-moe && bash device_moe.sh
# Logs go to $OUT (or ./out when unset). Exit status: non-zero if a test failed.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
rc=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
timeout 90 ./run.sh ./test_cuda_moe_grouped 2>&1 | tee "$out/test_moe_grouped.log" || rc=1
timeout 70 ./run.sh ./test_cuda_mhc_moe 2>&1 | tee "$out/test_mhc_moe.log" || rc=1
# The exp helper (device_fp.cuh) is shared with SwiGLU7 and the gate: their parity tests.
if [ -x ./test_cuda_backend ]; then
  timeout 40 ./run.sh ./test_cuda_backend --gtest_filter='-*Bench*' > "$out/test_backend.log" 2>&1 || rc=1
  tail -3 "$out/test_backend.log"
fi
timeout 80 ./run.sh ./bench_moe 2>&1 | tee "$out/bench_moe.log"
timeout 30 ./run.sh /usr/local/cuda/bin/compute-sanitizer --tool memcheck ./test_cuda_moe_grouped \
  --gtest_filter='*Replays*' > "$out/memcheck.log" 2>&1 || rc=1
tail -3 "$out/memcheck.log"
exit $rc
