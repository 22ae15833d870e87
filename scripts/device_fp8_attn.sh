#!/usr/bin/env bash
# Device check of FP8 attention (AttentionParams::fp8, --attention-compute fp8;
# docs/fp8.md): its parity tests, the op table, bench_attention --fp8 and the
# DiT step with and without it, on the H200. Run inside a bundle made with
#   bash scripts/cuda_bundle.sh build-dev build-dfp8 test_cuda_attn_cudnn test_cuda_backend_ops \
#     bench_attention magi2
#   cp scripts/device_fp8_attn.sh build-dfp8/
#   (golden: copy ../shared/golden/{dit_tiny,...} to build-dfp8/golden, tests/fixtures/. to build-dfp8/fixtures)
# then, with the device tool: run(carry=[...the bundle...], command="bash build-dfp8/device_fp8_attn.sh").
# Logs go to $OUT (the device tool's result folder; /tmp/fp8-attn-out elsewhere). About 8 minutes; each
# step has its own timeout, so a hung kernel costs only its step.
set -u
out=${OUT:-/tmp/fp8-attn-out}
mkdir -p "$out"
cd "$(dirname "$0")"
[ -d golden ] && export MAGI2_GOLDEN_DIR=$PWD/golden
[ -d fixtures ] && export MAGI2_FIXTURE_DIR=$PWD/fixtures
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
rc=0
step() {  # name, timeout, command...
  local name=$1 lim=$2
  shift 2
  timeout "$lim" ./run.sh "$@" > "$out/$name.log" 2>&1
  local r=$?
  [ $r -eq 0 ] || rc=1
  echo "== $name rc=$r"
}
step attn 150 ./test_cuda_attn_cudnn --gtest_filter=*Flash*
grep -E "FP8 flash|\[  (PASSED|FAILED)|Failure|Expected|Which is|rror" "$out/attn.log" | head -40
step bench_attn 240 ./bench_attention --fp8 --fp32 --reps 5
grep -E "^\||FP8|vs the|GPU|^272p|^540p" "$out/bench_attn.log" | grep -v "producer kernel\|consumer kernel" | head -40
step ops 200 ./test_cuda_backend_ops
grep -E "attention|entries|PASSED|FAILED" "$out/ops.log" | head -20
bench="./magi2 bench --resolutions 272p --steps 2 --warmup 1"
step step_bf16 150 $bench
grep -E "^bench|attn.core|ceiling" "$out/step_bf16.log" | head -8
step step_fp8 150 $bench --attention-compute fp8
grep -E "^bench|attn.core|ceiling" "$out/step_fp8.log" | head -8
exit $rc
