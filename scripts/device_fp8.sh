#!/usr/bin/env bash
# Device check of the opt-in FP8 paths (docs/fp8.md): FP8 attention
# (--attention-compute fp8) and FP8 linears (--linear-compute fp8), on the H200.
# Run inside a bundle made with
#   bash scripts/cuda_bundle.sh build-dev build-dfp8 magi2 bench_attention $(cd tests/cuda && ls test_cuda_*.cpp | sed 's/\.cpp$//')
#   cp scripts/device_fp8.sh build-dfp8/
#   (golden: copy ../shared/golden/{dit_tiny,qwen35_text_tiny,sa_audio_vae_tiny,turbo_vae_tiny,
#    wan22_vae_encoder_tiny} to build-dfp8/golden, tests/fixtures/. to build-dfp8/fixtures)
# then, with the device tool: run(carry=[...the bundle...], command="bash build-dfp8/device_fp8.sh PHASE").
# PHASE: check (parity tests, the op table, bench_attention --fp8, the 272p step with each FP8 option;
#   ~3 min), full (bench_attention --fp8, then the whole 114B model in FP8 at 272p
#   and 540p with --attention-compute fp8 (LIN=1: and --linear-compute fp8) and without; needs an
#   H200, ~8 min), lin (the op table, then the 272p step in bf16 and with FP8 linears on cuBLASLt and
#   on CUTLASS; ~4 min), tests (every other CUDA test binary, ~1 min), w8a8 (the W8A8 fused expert kernel:
#   its tests and bench_moe at 272p; ~4 min), w8a8full (on an H200 the whole model with W8A8 experts,
#   BASE=1: and with W8A16; ~6 min), w8a8all (w8a8's test and bench_moe, then the step with W8A8 and W8A16
#   experts: the whole model on an H200, one shared bank elsewhere; ~8 min), rows8 (the producers' FP8 rows:
#   their tests, then the 272p step with and without FP8 linears; OLD=DIR: an older bundle's first; ~6 min),
#   prof (Nsight Compute on the fused W8A8 experts and the FP8 flash kernel, then the 272p step; ~4 min),
#   sass (Nsight Compute's per-instruction stall samples of the fused experts and the FP8 flash kernel; ~3 min),
#   sass_moe (the same for the fused experts alone), grid (the W8A8 kernel's MAGI2_W8A8_GRID forms against an
#   older build's bench_moe_old / magi2_old: tests, bench_moe, the 272p step; ~4 min), mhc (the one-pass
#   post + residual with the next logits: its tests, the op table, bench_moe --mhc, the 272p step against
#   magi2_old; ~6 min), final (every CUDA
#   test binary in the bundle, the op table, the 272p step against magi2_old and 540p; ~6 min on an H200).
# Logs go to $OUT (the device tool's result folder; /tmp/fp8-out elsewhere). Each step has its own
# timeout, so a hung kernel costs only its step.
set -u
phase=${1:-check}
out=${OUT:-/tmp/fp8-out}
mkdir -p "$out"
cd "$(dirname "$0")"
[ -d golden ] && export MAGI2_GOLDEN_DIR=$PWD/golden
[ -d fixtures ] && export MAGI2_FIXTURE_DIR=$PWD/fixtures
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv,noheader
rc=0
step() {  # name, timeout, command...
  local name=$1 lim=$2 t0
  shift 2
  t0=$(date +%s)
  timeout "$lim" ./run.sh "$@" > "$out/$name.log" 2>&1
  local r=$?
  [ $r -eq 0 ] || rc=1
  echo "== $name rc=$r $(( $(date +%s) - t0 ))s"
}
summary() { grep -E '^\[  PASSED|^\[  FAILED|Failure|Expected|Which is|rror' "$out/$1.log" | head -${2:-12}; }
bench_lines() { grep -E "^bench|step|mhc|router|attn.core|attn.proj|attn.glue|shared|split|dense|routed|ceiling|peak" "$out/$1.log" | head -${2:-14}; }
case $phase in
  check)
    step attn 150 ./test_cuda_attn_cudnn --gtest_filter='*Flash*'
    grep -E "FP8 flash" "$out/attn.log" | head -10; summary attn
    step ops 240 ./test_cuda_backend_ops
    grep -E "attention|linear|entries" "$out/ops.log" | head -20
    step bench_attn 150 ./bench_attention --fp8 --reps 5
    grep -E "^\||FP8|vs the|GPU|^272p|^540p" "$out/bench_attn.log" | grep -v "producer kernel\|consumer kernel" | head -30
    b="./magi2 bench --resolutions 272p --steps 2 --warmup 1"
    step step_bf16 120 $b; bench_lines step_bf16
    step step_attn8 120 $b --attention-compute fp8; bench_lines step_attn8 6
    step step_lin8 120 $b --linear-compute fp8; bench_lines step_lin8
    ;;
  full)
    # The FP8 attention bench first (short), then the whole model with and without it.
    step bench_attn 90 ./bench_attention --fp8 --reps 3
    grep -E "FP8|bf16 flash|GPU|^272p|^540p" "$out/bench_attn.log" | head -16
    b="./magi2 bench --weights fp8-experts --full-model --resolutions ${RES:-272p,540p} --steps 2 --warmup 1"
    step full_fp8 ${T1:-200} $b --attention-compute fp8 ${LIN:+--linear-compute fp8}; bench_lines full_fp8 30
    step full_base ${T2:-150} $b; bench_lines full_base 30
    ;;
  lin)
    # FP8 linears: the op table (cuBLASLt's block-scaled path against the CPU), then the 272p step
    # in bf16, with FP8 linears on cuBLASLt (the default) and on the CUTLASS fallback.
    step ops 240 ./test_cuda_backend_ops
    grep -E "linear|entries" "$out/ops.log" | head -20
    b="./magi2 bench --resolutions 272p --steps 2 --warmup 1"
    step step_bf16 120 $b; bench_lines step_bf16
    step step_lin8 120 $b --linear-compute fp8; bench_lines step_lin8
    step step_lin8_cutlass 120 env MAGI2_FP8_LINEAR_GEMM=cutlass $b --linear-compute fp8; bench_lines step_lin8_cutlass
    ;;
  tests)
    for t in test_cuda_moe_grouped test_cuda_fused test_cuda_mhc_moe test_cuda_fp8_experts test_cuda_fp8_w8a8 \
             test_cuda_dit_step test_cuda_attention test_cuda_backend test_cuda_conv_slices test_cuda_decoders \
             test_cuda_upload test_cuda_residency test_cuda_offload test_cuda_refiner test_cuda_text_encoder; do
      [ -x "./$t" ] || continue
      step "$t" 150 "./$t"; summary "$t" 6
    done
    ;;
  w8a8)
    # The W8A8 fused expert kernel (moe_expert_fused_fp8.cu): its tests, the MoE tests beside it, then
    # bench_moe at 272p (bf16, W8A16 and W8A8 routed experts in one run). ~4 min.
    step w8a8 240 ./test_cuda_fp8_w8a8; summary w8a8 16
    grep -E "rel-RMS" "$out/w8a8.log" | head -8
    step moe 150 ./test_cuda_moe_grouped; summary moe 6
    step fp8e 150 ./test_cuda_fp8_experts; summary fp8e 6
    step bench_moe 240 ./bench_moe ${TOKENS:-29872}
    grep -E "^cuBLAS|^device|^\| natural(, fused| experts|, FP8)|^\| skewed, (fused|FP8)" "$out/bench_moe.log" |
      grep -E "^cu|^dev|total|W13|sort" | head -24
    ;;
  w8a8full)
    # On an H200 (>= 120 GB): the whole model with W8A8 experts, then (BASE=1) with W8A16, both with FP8
    # attention, one process each. ~6 min.
    b="./magi2 bench --weights fp8-experts --full-model --resolutions ${RES:-272p,540p} --steps 2 --warmup 1 --attention-compute fp8"
    step full_w8a8 ${T1:-300} $b --fp8-compute w8a8; bench_lines full_w8a8 30
    [ -n "${BASE:-}" ] && { step full_w8a16 ${T2:-280} $b; bench_lines full_w8a16 30; }
    ;;
  w8a8all)
    # One call for the whole W8A8 picture: its test and bench_moe at 272p, then the step with W8A8 and with
    # W8A16 experts (FP8 attention both): on an H200 the whole 114B model at 272p and 540p (W8A16 at 272p
    # only, the baseline), elsewhere one shared FP8 bank at 272p. ~8 min on an H200.
    step w8a8 200 ./test_cuda_fp8_w8a8; summary w8a8 16
    grep -E "rel-RMS" "$out/w8a8.log" | head -8
    step bench_moe 200 ./bench_moe ${TOKENS:-29872}
    grep -E "^cuBLAS|^device|^\| natural(, fused| experts|, FP8)|^\| skewed, (fused|FP8)" "$out/bench_moe.log" |
      grep -E "^cu|^dev|total|W13|sort" | head -24
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    b="./magi2 bench --weights fp8-experts --steps 2 --warmup 1 --attention-compute fp8"
    if [ "$mem" -gt 120000 ]; then
      step full_w8a8 ${T1:-240} $b --full-model --resolutions 272p,540p --fp8-compute w8a8; bench_lines full_w8a8 30
      step full_w8a16 ${T2:-150} $b --full-model --resolutions 272p; bench_lines full_w8a16 20
    else
      step step_w8a8 150 $b --resolutions 272p --fp8-compute w8a8; bench_lines step_w8a8 20
      step step_w8a16 150 $b --resolutions 272p; bench_lines step_w8a16 20
    fi
    ;;
  qkv8)
    # The FP8 attention producer (AttnQkvParams::fp8, attn_glue.cu): the attention tests, bench_attention --fp8 (each
    # producer form timed), the op table, then the 272p step with FP8 attention and W8A8 experts for each
    # MAGI2_ATTN_QKV_FP8 (two-pass: the path before it) -- the whole model on an H200, one shared
    # FP8 bank elsewhere. ~7 min on an H100.
    step attn 200 ./test_cuda_attn_cudnn; summary attn 12
    step bench_attn 150 ./bench_attention --fp8 --reps 5
    grep -E "FP8 (producer|quantiser|: quantiser)|^272p|^540p" "$out/bench_attn.log" | head -16
    step ops 240 ./test_cuda_backend_ops; grep -E "attn_qkv|FP8 operands|entries|FAIL" "$out/ops.log" | head -12
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    b="./magi2 bench --weights fp8-experts --steps 2 --warmup 1 --attention-compute fp8 --fp8-compute w8a8 --resolutions ${RES:-272p}"
    [ "$mem" -gt 120000 ] && b="$b --full-model"
    for k in ${KERNELS:-two-pass q-in-producer}; do
      step "step_$k" ${T1:-200} env MAGI2_ATTN_QKV_FP8=$k $b; bench_lines "step_$k" 24
    done
    ;;
  qkv8full)
    # On an H200: the producer's parity test, then the whole 114B model (W8A8 experts, FP8 attention) at
    # 272p and 540p with the default producer, and at 272p with the two-pass path. ~8 min.
    step attn 120 ./test_cuda_attn_cudnn --gtest_filter='*AttnQkvFp8*:*FlashFp8*'; summary attn 6
    b="./magi2 bench --weights fp8-experts --full-model --steps 2 --warmup 1 --attention-compute fp8 --fp8-compute w8a8"
    step full_default ${T1:-300} $b --resolutions 272p,540p; bench_lines full_default 40
    step full_two_pass ${T2:-170} env MAGI2_ATTN_QKV_FP8=two-pass $b --resolutions 272p
    bench_lines full_two_pass 20
    ;;
  rows8)
    # FP8 rows from the producers (RmsNormParams::y8, AttnOutParams::out8 -> LinearParams::x8): their tests and
    # the op table, then the 272p step with FP8 linears and with bf16 linears (W8A8 experts, FP8 attention; the
    # whole model on an H200, one shared bank elsewhere). OLD=DIR: the same two steps with DIR's magi2 first
    # (an older bundle, the before). ~6 min on an H200.
    step ops 240 ./test_cuda_backend_ops; grep -E "rms_norm|linear|entries|FAIL|Fp8Linear" "$out/ops.log" | head -20
    step attn 150 ./test_cuda_attn_cudnn --gtest_filter='*AttnOut*:*AttnQkvFp8*'; summary attn 6
    step dit 240 ./test_cuda_dit_step; summary dit 6
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    b="bench --weights fp8-experts --steps 2 --warmup 1 --attention-compute fp8 --fp8-compute w8a8 --resolutions ${RES:-272p}"
    [ "$mem" -gt 120000 ] && b="$b --full-model"
    if [ -n "${OLD:-}" ]; then
      step old_lin8 ${T1:-200} "$OLD/magi2" $b --linear-compute fp8; bench_lines old_lin8 14
    fi
    step new_lin8 ${T1:-200} ./magi2 $b --linear-compute fp8; bench_lines new_lin8 14
    step new_bf16 ${T1:-200} ./magi2 $b; bench_lines new_bf16 14
    ;;
  prof)
    # Nsight Compute on the two largest kernels of the step: the W8A8 fused routed experts (bench_moe at
    # 272p) and the FP8 flash attention (bench_attention --fp8), one launch each, the sections that say
    # what binds them (pipes, warp stalls, memory). Then (unless NOSTEP=1) the 272p step with FP8 linears.
    # ~4 min on an H200.
    ncu=/usr/local/cuda/bin/ncu
    secs="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy --section InstructionStats --section LaunchStats"
    # shellcheck disable=SC2086
    step prof_moe 240 $ncu $secs -k regex:expert_fused_fp8 --launch-skip 1 --launch-count 1 ./bench_moe 29872
    # shellcheck disable=SC2086
    step prof_attn 240 $ncu $secs --kernel-name-base demangled -k "regex:attention_flash_kernel<\(bool\)1, \(int\)128, \(int\)[0-9]+, \(bool\)0, \(int\)0>" \
      --launch-count 1 ./bench_attention --fp8 --reps 1
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    b="bench --weights fp8-experts --steps 2 --warmup 1 --attention-compute fp8 --fp8-compute w8a8 --linear-compute fp8"
    [ "$mem" -gt 120000 ] && b="$b --full-model"
    if [ -z "${NOSTEP:-}" ]; then
      step step272 ${T1:-200} ./magi2 $b --resolutions 272p; bench_lines step272 14
    fi
    ;;
  sass)
    # Per-instruction warp stall samples (Nsight Compute's source page, SASS) of the W8A8 fused experts
    # (sass_moe) and of the FP8 flash kernel, with the stall reasons' breakdown. ~3 min.
    bash "$0" sass_moe
    ncu=/usr/local/cuda/bin/ncu
    secs="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis"
    # shellcheck disable=SC2086
    step sass_attn_run 300 $ncu $secs --import-source no -f -o "$out/attn" --kernel-name-base demangled \
      -k "regex:attention_flash_kernel<\(bool\)1, \(int\)128, \(int\)2, \(bool\)0, \(int\)0>" --launch-count 1 \
      ./bench_attention --fp8 --reps 1
    ./run.sh $ncu -i "$out/attn.ncu-rep" --page source --csv --print-source sass > "$out/attn_sass.csv" 2>&1
    ./run.sh $ncu -i "$out/attn.ncu-rep" --page details --print-details all > "$out/attn_details.txt" 2>&1
    rm -f "$out"/*.ncu-rep
    ;;
  sass_moe)
    # The W8A8 fused experts' per-instruction stall samples alone (bench_moe at 272p, one launch).
    ncu=/usr/local/cuda/bin/ncu
    secs="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis"
    # shellcheck disable=SC2086
    step sass_moe_run 300 $ncu $secs --import-source no -f -o "$out/moe" -k regex:expert_fused_fp8 --launch-skip 1 \
      --launch-count 1 ./bench_moe 29872
    ./run.sh $ncu -i "$out/moe.ncu-rep" --page source --csv --print-source sass > "$out/moe_sass.csv" 2>&1
    ./run.sh $ncu -i "$out/moe.ncu-rep" --page details --print-details all > "$out/moe_details.txt" 2>&1
    rm -f "$out"/*.ncu-rep
    grep -E "Duration|Tensor|Issue Slots|SM Frequency" "$out/moe_details.txt" | head -8
    ;;
  grid)
    # The W8A8 experts' kernel with MAGI2_W8A8_GRID=persistent and =tiles (a knob of branch w8a8-pg2 only;
    # main ignores it) against an older build's
    # (bench_moe_old, magi2_old; OLDENV): its tests, then bench_moe at 272p twice each, interleaved,
    # then the 272p step with FP8 linears for each.
    step w8 200 ./test_cuda_fp8_w8a8; summary w8 8; grep -E "rel-RMS" "$out/w8.log" | head -3
    step w8t 200 env MAGI2_W8A8_GRID=tiles ./test_cuda_fp8_w8a8; summary w8t 4
    for tb in test_cuda_moe_grouped test_cuda_fp8_experts test_cuda_dit_step; do
      [ -x "./$tb" ] && { step "$tb" 240 "./$tb"; summary "$tb" 4; }
    done
    [ -x ./test_cuda_backend_ops ] && { step ops 300 ./test_cuda_backend_ops; grep -E "W8A8|entries" "$out/ops.log"; }
    for r in 1 2; do
      for v in old persistent tiles; do
        b=./bench_moe; e="MAGI2_W8A8_GRID=$v"; [ $v = old ] && b=./bench_moe_old && e="${OLDENV:-A=1}"
        # shellcheck disable=SC2086
        step moe_${v}_$r 240 env $e $b 29872
        grep -E "W8A8, K-major" "$out/moe_${v}_$r.log" | grep -E "W13 grouped|total" | head -2
      done
    done
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    b="bench --weights fp8-experts --steps 2 --warmup 1 --attention-compute fp8 --fp8-compute w8a8 --linear-compute fp8 --resolutions 272p"
    [ "$mem" -gt 120000 ] && b="$b --full-model"
    for v in old persistent tiles; do
      m=./magi2; e="MAGI2_W8A8_GRID=$v"; [ $v = old ] && m=./magi2_old && e="${OLDENV:-A=1}"
      # shellcheck disable=SC2086
      step step_$v ${T1:-200} env $e $m $b; grep -E "^bench|routed" "$out/step_$v.log" | cut -c1-120
    done
    ;;
  mhc)
    # The next branch's logits in the post + residual's pass (mhc_post_logits.cu): every test, the op table,
    # bench_moe's mHC rows at 272p, then the step (W8A8, FP8 attention and linears) at 272p with magi2_old
    # and magi2 REPS times (2), interleaved; RES540=1 also 540p with magi2.
    # Every CUDA test binary in the bundle first (TESTS="names": those), test_cuda_fused's mHC lines.
    for tb in ${TESTS:-./test_cuda_*}; do
      n=$(basename "$tb"); [ "$n" = test_cuda_backend_ops ] && continue
      step "$n" 300 "$tb"; summary "$n" 3
    done
    grep -E "one pass|then the logits|checked entry|\[D=" "$out/test_cuda_fused.log" | head -30
    step ops 300 ./test_cuda_backend_ops; grep -E "mhc|entries|FAIL" "$out/ops.log" | head -16
    step bench_mhc 240 ./bench_moe --mhc 29872; grep -E "mHC|copy|cuBLASLt" "$out/bench_mhc.log" | head -20
    if [ "${PARTS8:-1}" != 0 ]; then
      step bench_mhc8 240 env MAGI2_MHC_POST_PARTS=8 ./bench_moe --mhc 29872
      grep -E "one pass|pass alone|copy" "$out/bench_mhc8.log" | head -6
    fi
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    b="bench --weights fp8-experts --steps 2 --warmup 1 --attention-compute fp8 --fp8-compute w8a8 --linear-compute fp8"
    [ "$mem" -gt 120000 ] && b="$b --full-model"
    for i in $(seq "${REPS:-2}"); do
      # shellcheck disable=SC2086
      [ -x ./magi2_old ] && { step step_old$i ${T1:-240} ./magi2_old $b --resolutions 272p; bench_lines step_old$i 14; }
      # shellcheck disable=SC2086
      step step_new$i ${T1:-240} ./magi2 $b --resolutions 272p; bench_lines step_new$i 14
    done
    if [ "${RES540:-0}" != 0 ]; then
      # shellcheck disable=SC2086
      step step540 ${T1:-300} ./magi2 $b --resolutions 540p; bench_lines step540 14
    fi
    ;;
  mhc_forms)
    # The one-pass mHC kernel's forms (mhc_post_logits.cu PassForm; the default prefetches 128 bytes): its
    # tests with the 256-byte prefetch, bench_moe --mhc with each form, the 272p step (magi2_old, then
    # magi2 with FORM's knobs, default none set), then (unless NOPROF=1) prof_mhc. ~4 min.
    step fused_pf 120 env MAGI2_MHC_PASS_PREFETCH=256 ./test_cuda_fused --gtest_filter='*Mhc*'; summary fused_pf 3
    step dit_pf 120 env MAGI2_MHC_PASS_PREFETCH=256 ./test_cuda_dit_step; summary dit_pf 3
    i=0
    for f in "" "MAGI2_MHC_PASS_PREFETCH=none" "MAGI2_MHC_PASS_PREFETCH=256" \
      "MAGI2_MHC_POST_PARTS=8"; do
      i=$((i + 1))
      # shellcheck disable=SC2086
      step form$i 120 env $f ./bench_moe --mhc 29872
      echo "-- form $i: ${f:-default}"
      grep -E "one pass|pass alone|sums of squares from the post: (post|logits)|copy 2" "$out/form$i.log" | head -6
    done
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    b="bench --weights fp8-experts --steps 2 --warmup 1 --attention-compute fp8 --fp8-compute w8a8 --linear-compute fp8"
    [ "$mem" -gt 120000 ] && b="$b --full-model"
    for r in $(seq "${REPS:-1}"); do
      # shellcheck disable=SC2086
      step step_old$r ${T1:-240} ./magi2_old $b --resolutions 272p; bench_lines step_old$r 14
      # shellcheck disable=SC2086
      step step_new$r ${T1:-240} env ${FORM:-} ./magi2 $b --resolutions 272p
      bench_lines step_new$r 14
    done
    [ "${NOPROF:-0}" != 0 ] || bash "$0" prof_mhc
    ;;
  prof_mhc)
    # Nsight Compute on the one-pass mHC kernel (post + residual with the next logits, and the pass alone)
    # and the lean post + residual kernel beside it (bench_moe --mhc at 272p, one launch each): speed of
    # light, memory, warp stalls, and the per-instruction stall samples. ~2 min.
    ncu=/usr/local/cuda/bin/ncu
    secs="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section SourceCounters --section ComputeWorkloadAnalysis"
    i=0
    for k in 'mhc_post_logits_kernel<\(bool\)1,' 'mhc_post_logits_kernel<\(bool\)0,' 'mhc_post_res_lean_kernel'; do
      i=$((i + 1))
      # shellcheck disable=SC2086
      step prof_mhc$i 200 env ${PROF_FORM:-MAGI2_MHC_POST_PARTS=4} $ncu $secs --import-source no -f -o "$out/mhc$i" --kernel-name-base demangled \
        -k "regex:$k" --launch-skip 2 --launch-count 1 ./bench_moe --mhc 29872
      ./run.sh $ncu -i "$out/mhc$i.ncu-rep" --page source --csv --print-source sass > "$out/mhc${i}_sass.csv" 2>&1
      ./run.sh $ncu -i "$out/mhc$i.ncu-rep" --page details --print-details all > "$out/mhc${i}_details.txt" 2>&1
      grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots|Registers Per|Achieved Occ|Stall|No Eligible" \
        "$out/mhc${i}_details.txt" | head -16
    done
    rm -f "$out"/*.ncu-rep
    ;;
  final)
    # The device check of the session's last CUDA code: every CUDA test binary in the bundle, the op table,
    # then the step (W8A8 experts, FP8 attention, FP8 linears) at 272p with magi2_old (OLDENV) and magi2,
    # and at 540p with magi2 (RES540=0 skips it); the whole model on an H200, one shared bank elsewhere.
    for tb in ./test_cuda_*; do
      n=$(basename "$tb"); [ "$n" = test_cuda_backend_ops ] && continue
      step "$n" 300 "$tb"; summary "$n" 3
    done
    step ops 300 ./test_cuda_backend_ops; grep -E "entries|FAIL" "$out/ops.log" | head -4
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    b="bench --weights fp8-experts --steps 2 --warmup 1 --attention-compute fp8 --fp8-compute w8a8 --linear-compute fp8"
    [ "$mem" -gt 120000 ] && b="$b --full-model"
    if [ -x ./magi2_old ]; then
      # shellcheck disable=SC2086
      step step_old ${T1:-240} env ${OLDENV:-A=1} ./magi2_old $b --resolutions 272p; bench_lines step_old 14
    fi
    # shellcheck disable=SC2086
    step step272 ${T1:-240} ./magi2 $b --resolutions 272p; bench_lines step272 14
    if [ "${RES540:-1}" != 0 ]; then
      # shellcheck disable=SC2086
      step step540 ${T1:-300} ./magi2 $b --resolutions 540p; bench_lines step540 14
    fi
    ;;
  *) echo "device_fp8.sh: PHASE must be check, full, lin, tests, w8a8, w8a8full, w8a8all, qkv8, qkv8full, rows8," \
       "prof, sass, sass_moe, grid, mhc or final, got '$phase'" >&2; exit 2 ;;
esac
exit $rc
