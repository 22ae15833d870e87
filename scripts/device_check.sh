#!/usr/bin/env bash
# One command for the H200 (docs/cuda.md "The device loop"): builds the CUDA
# targets here, bundles them with the libraries the device image lacks, the
# golden fixtures the CUDA tests read and (when present) the official code for
# the side-by-side timing, into the git-ignored folder build-device/ of the
# checkout the device tool sends, and prints the exact `run` call. On the
# device, build-device/device_run.sh runs every CUDA test, the bench at 272p and
# 540p (with MAGI2_FP8_BENCH=1 also the FP8 full-model bench), the codecs (with
# MAGI2_DECODE_1080P=1 also TurboVAE on the 1080p latent) and the official
# layers' timing, and writes logs under $OUT. The same bundle runs the prompt ->
# clip job: bash scripts/device_generate.sh build-device (1080p: see that script).
# Usage: bash scripts/device_check.sh [BUILD_DIR]   (default: build-dev, configured
#   here with libsndfile off and the system FFmpeg off: their shared libraries are
#   ~160 MB, past the 64 MiB the device tool carries; the device image has neither.
#   When the static FFmpeg + x264 of scripts/ffmpeg_static.sh is there, magi2 links
#   it (about 3 MB, no libav*.so at run time) and writes MP4 on the device too.)
#   MAGI2_FFMPEG_STATIC_PREFIX  its install folder (default: .deps/ffmpeg-static here);
#                      an existing BUILD_DIR is reconfigured when this flips
#   MAGI2_DEVICE_ROOT   checkout the device tool sends (default: this one)
#   MAGI2_OFFICIAL_DIR  official SandAI tree (default: .oracle/official in that checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-dev}
ff_prefix=${MAGI2_FFMPEG_STATIC_PREFIX:-$(pwd)/.deps/ffmpeg-static}
if [ -f "$ff_prefix/lib/pkgconfig/libavformat.pc" ] && [ -f "$ff_prefix/lib/libx264.a" ]; then
  ff_static=ON
  ff_opts=(-DMAGI2_WITH_FFMPEG=ON -DMAGI2_FFMPEG_STATIC=ON "-DCMAKE_PREFIX_PATH=$ff_prefix")
else
  ff_static=OFF
  ff_opts=(-DMAGI2_WITH_FFMPEG=OFF -DMAGI2_FFMPEG_STATIC=OFF)
fi
# Configured when new, or when the static FFmpeg appeared or went (only the media
# library and the links are rebuilt then). CMAKE_PREFIX_PATH puts the prefix's
# lib/pkgconfig ahead of the system's for pkg-config; -U drops a cached look-up.
# MAGI2_C_API=ON as scripts/setup.sh configures build/: the same compile flags
# (position-independent code), so ccache serves the objects build/ compiled.
if [ ! -f "$build/build.ninja" ] || ! grep -q "^MAGI2_FFMPEG_STATIC:BOOL=$ff_static\$" "$build/CMakeCache.txt"; then
  PKG_CONFIG_PATH="$ff_prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
    -DMAGI2_C_API=ON -DMAGI2_WITH_SNDFILE=OFF "${ff_opts[@]}" -U '__pkg_config_*FFMPEG' -U 'pkgcfg_lib_FFMPEG_*' >/dev/null
fi
grep -q "^MAGI2_FFMPEG_STATIC:BOOL=$ff_static\$" "$build/CMakeCache.txt" ||
  { echo "device_check: $build did not take MAGI2_FFMPEG_STATIC=$ff_static" >&2; exit 1; }
root=${MAGI2_DEVICE_ROOT:-$(pwd)}
out="$root/build-device"
tests=$(cd tests/cuda && ls test_cuda_*.cpp | sed 's/\.cpp$//' | tr '\n' ' ')
benches=$( [ -d bench ] && (cd bench && ls bench_*.cpp 2>/dev/null | sed 's/\.cpp$//' | tr '\n' ' ') || true)
# shellcheck disable=SC2086
bash scripts/cuda_bundle.sh "$build" "$out" magi2 $tests $benches >/dev/null
if [ $ff_static = ON ] && ldd "$out/magi2" | grep -Eq 'lib(av[a-z]+|swscale|swresample|x264)\.so'; then
  echo "device_check: $out/magi2 links a shared FFmpeg/x264 despite the static prefix" >&2; exit 1
fi
echo "device_check: MP4 output $( [ $ff_static = ON ] && echo "on (static FFmpeg from $ff_prefix)" || echo "off (no $ff_prefix: bash scripts/ffmpeg_static.sh)")"
mkdir -p "$out/golden"
cp -r ../shared/golden/dit_tiny "$out/golden/"
cp -r ../shared/golden/qwen35_text_tiny "$out/golden/"  # test_cuda_text_encoder (4.5 MB)
# test_cuda_decoders (10 MB together)
for d in sa_audio_vae_tiny turbo_vae_tiny wan22_vae_encoder_tiny; do cp -r "../shared/golden/$d" "$out/golden/"; done
rm -rf "$out/fixtures" && cp -r tests/fixtures "$out/fixtures"
[ -d ../shared/oracle ] && cp -r ../shared/oracle "$out/oracle"
cat > "$out/device_run.sh" <<RUN
#!/usr/bin/env bash
# Runs on the H200: every CUDA test, the bench, the official layers (if carried).
here=\$(cd "\$(dirname "\$0")" && pwd)
cd "\$here"
export MAGI2_GOLDEN_DIR=\$here/golden MAGI2_FIXTURE_DIR=\$here/fixtures OUT=\${OUT:-/tmp/out}
mkdir -p "\$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "\$OUT/gpu.txt"
for t in $tests; do
  timeout \${MAGI2_TEST_TIMEOUT:-300} ./run.sh ./\$t > "\$OUT/\$t.log" 2>&1; echo "\$t: exit \$? (\$(grep -E 'PASSED|FAILED' "\$OUT/\$t.log" | tr '\n' ' '))"
done
# With the static FFmpeg linked (scripts/ffmpeg_static.sh): a 2 s clip of the built-in tiny model, the DiT on
# CUDA, written as MP4 on the device (\$OUT/tiny_cuda.mp4, about 1.5 MB; ffprobe it here).
if [ "$ff_static" = ON ]; then
  MAGI2_CACHE_DIR=/tmp/magi2-cache timeout \${MAGI2_MP4_TIMEOUT:-180} ./run.sh ./magi2 generate --device cuda \\
    --model builtin:tiny --prompt "A red fox trots through fresh snow at dawn." --seconds 2 \\
    -o "\$OUT/tiny_cuda.mp4" > "\$OUT/generate_mp4.log" 2>&1
  echo "magi2 generate -o tiny_cuda.mp4: exit \$? (\$(tail -n 3 "\$OUT/generate_mp4.log" | tr '\\n' ' '))"
fi
timeout \${MAGI2_BENCH_TIMEOUT:-400} ./run.sh ./magi2 bench \${MAGI2_BENCH_ARGS:-} --json "\$OUT/bench.json" 2>&1 | tee "\$OUT/bench.log"
# One 1080p refiner forward at the release width, 4 of its 30 layers (docs/refiner.md "On CUDA").
timeout \${MAGI2_REFINER_BENCH_TIMEOUT:-150} ./run.sh ./magi2 bench --stage refiner --layers 4 --steps 2 --warmup 0 \
  --json "\$OUT/bench_refiner.json" 2>&1 | tee "\$OUT/bench_refiner.log"
# The Qwen3.5-27B text encoder at the release widths, 4 of its 62 feature layers, 300 and 2000 tokens (docs/cuda-stages.md).
timeout \${MAGI2_TEXT_BENCH_TIMEOUT:-200} ./run.sh ./magi2 bench --stage text --layers 4 --steps 3 --warmup 1 \
  --json "\$OUT/bench_text.json" 2>&1 | tee "\$OUT/bench_text.log"
# The codecs at the release widths on a 10 s clip (docs/cuda-stages.md "The codecs on the GPU"): TurboVAE at 272p and
# 540p, Stable Audio Open, the Wan2.2 image encoder, with cuDNN's conv3d (the default); opt-in (MAGI2_DECODE_1080P=1,
# about a minute more) TurboVAE on the 1080p refined latent (249 frames of 1920x1088) in its own call; then 272p
# with our bit-exact kernel (MAGI2_CONV_KERNEL=own, also for test_cuda_decoders). Random weights are written once under /tmp.
timeout \${MAGI2_DECODE_BENCH_TIMEOUT:-300} ./run.sh ./magi2 bench --stage decode --resolutions 272p,540p --steps 3 \
  --warmup 1 --json "\$OUT/bench_decode.json" 2>&1 | tee "\$OUT/bench_decode.log"
if [ -n "\${MAGI2_DECODE_1080P:-}" ]; then
  timeout \${MAGI2_DECODE_BENCH_TIMEOUT:-300} ./run.sh ./magi2 bench --stage decode --resolutions 1080p --steps 2 \
    --warmup 1 --json "\$OUT/bench_decode_1080p.json" 2>&1 | tee "\$OUT/bench_decode_1080p.log"
fi
MAGI2_CONV_KERNEL=own timeout \${MAGI2_DECODE_BENCH_TIMEOUT:-300} ./run.sh ./magi2 bench --stage decode \
  --resolutions 272p --steps 1 --warmup 0 --json "\$OUT/bench_decode_own.json" 2>&1 | tee "\$OUT/bench_decode_own.log"
MAGI2_CONV_KERNEL=own timeout \${MAGI2_TEST_TIMEOUT:-300} ./run.sh ./test_cuda_decoders > "\$OUT/test_cuda_decoders.own.log" 2>&1
echo "test_cuda_decoders (MAGI2_CONV_KERNEL=own): exit \$? (\$(grep -E 'PASSED|FAILED' "\$OUT/test_cuda_decoders.own.log" | tr '\n' ' '))"
# FP8 routed experts, the whole model resident (docs/fp8.md); opt-in: MAGI2_FP8_BENCH=1 (about 2-3 minutes).
if [ -n "\${MAGI2_FP8_BENCH:-}" ]; then
  timeout \${MAGI2_FP8_BENCH_TIMEOUT:-300} ./run.sh ./magi2 bench --weights fp8-experts --full-model --steps 3 \
    \${MAGI2_FP8_BENCH_ARGS:-} --json "\$OUT/bench_fp8_full.json" 2>&1 | tee "\$OUT/bench_fp8_full.log"
fi
for b in $benches; do timeout \${MAGI2_KERNEL_BENCH_TIMEOUT:-120} ./run.sh ./\$b > "\$OUT/\$b.log" 2>&1; echo "\$b: exit \$?"; tail -25 "\$OUT/\$b.log"; done
# Opt-in (MAGI2_DEVICE_FUSED=1 in the run command): the DiT step test and magi2 bench again with the fused
# mHC and router kernels switched on (bench_moe above times them without the switches).
if [ -n "\${MAGI2_DEVICE_FUSED:-}" ]; then
  export MAGI2_MHC_KERNEL=fused MAGI2_ROUTER_KERNEL=fused
  for t in test_cuda_dit_step test_cuda_backend_ops; do
    timeout \${MAGI2_TEST_TIMEOUT:-300} ./run.sh ./\$t > "\$OUT/\$t.fused.log" 2>&1; echo "\$t (fused kernels): exit \$? (\$(grep -E 'PASSED|FAILED' "\$OUT/\$t.fused.log" | tr '\n' ' '))"
  done
  timeout \${MAGI2_BENCH_TIMEOUT:-400} ./run.sh ./magi2 bench \${MAGI2_BENCH_ARGS:-} --json "\$OUT/bench.fused.json" 2>&1 | tee "\$OUT/bench.fused.log"
  unset MAGI2_MHC_KERNEL MAGI2_ROUTER_KERNEL
fi
# The same layers through the official PyTorch code (shared/oracle), when its tree is carried as .oracle/official.
if [ -d "\$here/../.oracle/official" ] && [ -n "\${MAGI2_OFFICIAL_BENCH:-}" ]; then
  PYTHONUNBUFFERED=1 timeout \${MAGI2_OFFICIAL_TIMEOUT:-200} python3 oracle/bench_official_layers.py \\
    --official "\$here/../.oracle/official" --stubs oracle/stubs --out "\$OUT/official" --part model --attn cudnn \\
    --reps 3 --deadline-s \${MAGI2_OFFICIAL_DEADLINE:-180} 2>&1 | tail -40
fi
RUN
chmod +x "$out/device_run.sh"
du -sh "$out"
echo "device call: run(carry=[\"build-device\", \".oracle\"], command=\"bash build-device/device_run.sh\")"
