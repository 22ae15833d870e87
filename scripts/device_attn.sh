#!/usr/bin/env bash
# Device check of the CUDA attention (issue 10): parity tests and the benchmark
# on the H200. Run inside a bundle made with
#   bash scripts/cuda_bundle.sh build /work/main/build-bundle-attn \
#     test_cuda_attn_cudnn test_cuda_attention test_cuda_backend bench_attention
#   cp scripts/device_attn.sh /work/main/build-bundle-attn/
# then, with the device tool: run(carry=["build-bundle-attn"],
#   command="cd build-bundle-attn && bash device_attn.sh")
# Logs go to $OUT (the device tool's result folder; /tmp/attn-out elsewhere).
# Under 5 minutes (each step has its own timeout).
set -u
out=${OUT:-/tmp/attn-out}
mkdir -p "$out"
cd "$(dirname "$0")"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  find /usr/local/cuda*/ /usr/lib /usr/local/lib /opt -name 'libcudnn.so.9*' 2>/dev/null | head -n3
  ./run.sh ldd ./bench_attention | grep -E "cudnn|nvrtc|cublas|not found"
} > "$out/env.log" 2>&1
cat "$out/env.log"
rc=0
# Ordered by value (the device tool's command limit): the cuDNN parity tests, the benchmark, the rest.
run_test() {  # name, timeout, gtest args...
  local t=$1 lim=$2
  shift 2
  [ -x "./$t" ] || return 0
  timeout "$lim" ./run.sh "./$t" "$@" > "$out/$t.log" 2>&1 || rc=1
  grep -E "^\[  (PASSED|FAILED) |cuDNN|differ|Failure|rel-RMS|unavailable|Expected|Which is" "$out/$t.log" | head -60
}
run_test test_cuda_attn_cudnn 90
timeout 100 ./run.sh ./bench_attention --fp32 2>&1 | tee "$out/bench_attention.log" || rc=1
run_test test_cuda_attention 50
run_test test_cuda_backend 40 --gtest_filter=-*Bench*
timeout 15 ./run.sh /usr/local/cuda/bin/compute-sanitizer --tool memcheck ./test_cuda_attn_cudnn \
  --gtest_filter=*AttnQkv*:*AttnOut* > "$out/memcheck.log" 2>&1
tail -n 3 "$out/memcheck.log"
exit $rc
