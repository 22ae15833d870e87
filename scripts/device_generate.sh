#!/usr/bin/env bash
# Issue 12 item 6 on the GPU machine: `magi2 generate --device cuda` on a
# random-weight model in the official layout at the release widths (few
# layers), prompt -> clip with every stage on the GPU, and the per-stage times
# from the metrics. With MAGI2_GEN_RESOLUTION=1080p it runs the whole 1080p
# job: the 540p preview, the refiner (make-random --refiner-layers R) and the
# TurboVAE decode of the refined latent (249 frames of 1920x1088 for 10 s).
#
# Build the bundle here (CUDA build; FFmpeg is optional: without it the clip is
# written as PNG frames + WAV instead of MP4), then run this on the device:
#   bash scripts/cuda_bundle.sh build-dev build-gen magi2
#   cp scripts/device_generate.sh build-gen/
#   run(carry=["build-gen"], command="bash build-gen/device_generate.sh")
# or, from the bundle scripts/device_check.sh makes (build-device/ holds magi2 + run.sh):
#   run(carry=["build-device"], command="bash scripts/device_generate.sh build-device")
#   run(carry=["build-device"], command="MAGI2_GEN_RESOLUTION=1080p MAGI2_GEN_REFINER_LAYERS=2 \
#       bash scripts/device_generate.sh build-device")
# Usage: device_generate.sh [BUNDLE_DIR]   (default: this script's folder; it
#   holds magi2 and run.sh as cuda_bundle.sh writes them)
# Environment (all optional):
#   MAGI2_RANDOM_LAYERS (2; alias MAGI2_GEN_LAYERS), MAGI2_RANDOM_TEXT_LAYERS (4), MAGI2_RANDOM_FP8_EXPERTS (0)
#   MAGI2_RANDOM_REFINER_LAYERS (alias MAGI2_GEN_REFINER_LAYERS): refiner layers of the
#                       folder, 0..30 (default 2 at 1080p, else 0: no refiner/, as before)
#   MAGI2_RANDOM_DIR    model folder (default /tmp/magi2-random; removed first and
#                       at the end unless MAGI2_KEEP_RANDOM=1)
#   MAGI2_GEN_STEPS (4), MAGI2_GEN_RESOLUTION (272p | 540p | 1080p), MAGI2_GEN_SECONDS (10)
#   MAGI2_GEN_REFINER_STEPS (5)  1080p: --refiner-num-inference-steps
#   MAGI2_GEN_CLIP_DIR  where the clip goes (default: OUT; at 1080p /tmp/magi2-gen-clip, since a
#                       random model's 1080p clip is noise that does not compress: GBs of frames
#                       the device tool would not carry back; its size and digests are in the metrics)
#   MAGI2_GEN_PROMPT    the prompt
#   OUT                 where the clip, metrics.json and the logs go (default /tmp/out)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=$(cd "${1:-$here}" && pwd)
[ -x "$bundle/magi2" ] && [ -x "$bundle/run.sh" ] || {
  echo "device_generate: no magi2 + run.sh in $bundle (make it with scripts/cuda_bundle.sh BUILD DIR magi2)" >&2
  exit 2
}
out=${OUT:-/tmp/out}
mkdir -p "$out"
model=${MAGI2_RANDOM_DIR:-/tmp/magi2-random}
layers=${MAGI2_RANDOM_LAYERS:-${MAGI2_GEN_LAYERS:-2}}
text_layers=${MAGI2_RANDOM_TEXT_LAYERS:-4}
steps=${MAGI2_GEN_STEPS:-4}
res=${MAGI2_GEN_RESOLUTION:-272p}
seconds=${MAGI2_GEN_SECONDS:-10}
# The refiner only runs at 1080p; elsewhere the folder keeps no refiner/ (the old default).
default_refiner_layers=0
[ "$res" = 1080p ] && default_refiner_layers=2
refiner_layers=${MAGI2_RANDOM_REFINER_LAYERS:-${MAGI2_GEN_REFINER_LAYERS:-$default_refiner_layers}}
refiner_steps=${MAGI2_GEN_REFINER_STEPS:-5}
if [ "$res" = 1080p ] && [ "$refiner_layers" -lt 1 ]; then
  echo "device_generate: MAGI2_GEN_RESOLUTION=1080p needs MAGI2_GEN_REFINER_LAYERS >= 1 (the refiner/ folder)" >&2
  exit 2
fi
clip_dir=$out
[ "$res" = 1080p ] && clip_dir=/tmp/magi2-gen-clip
clip_dir=${MAGI2_GEN_CLIP_DIR:-$clip_dir}
mkdir -p "$clip_dir"
prompt=${MAGI2_GEN_PROMPT:-A red fox trots through fresh snow at dawn, its breath steaming in the cold air.}
m2() { "$bundle/run.sh" "$bundle/magi2" "$@"; }
cleanup() { [ "${MAGI2_KEEP_RANDOM:-0}" = 1 ] || rm -rf "$model"; }
trap cleanup EXIT

nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader || true
df -h "$(dirname "$model")" | tail -1

# 1. The model folder at the release widths.
rm -rf "$model"
extra=()
[ "${MAGI2_RANDOM_FP8_EXPERTS:-0}" = 1 ] && extra+=(--fp8-experts)
[ "$refiner_layers" -gt 0 ] && extra+=(--refiner-layers "$refiner_layers")
t0=$(date +%s%N)
m2 make-random "$model" --layers "$layers" --text-layers "$text_layers" "${extra[@]}" 2>&1 | tee "$out/make_random.log"
t1=$(date +%s%N)
echo "device_generate: make-random took $(( (t1 - t0) / 1000000 )) ms; folder $(du -sh "$model" | cut -f1)"

# 2. MP4 when the binary has FFmpeg, else frames + WAV (generate refuses -o .mp4 up front without it).
common=(generate --device cuda --model "$model" --prompt "$prompt" --resolution "$res" --seconds "$seconds"
        --num-inference-steps "$steps" --text-encoder-device auto --decoder-device auto)
[ "$res" = 1080p ] && common+=(--refiner-num-inference-steps "$refiner_steps")
if m2 "${common[@]}" --dry-run -o "$clip_dir/clip.mp4" > "$out/dry_run.log" 2>&1; then
  outputs=(-o "$clip_dir/clip.mp4")
elif grep -q "no FFmpeg" "$out/dry_run.log"; then
  echo "device_generate: this magi2 has no FFmpeg: writing PNG frames + WAV instead of MP4"
  outputs=(--save-frames "$clip_dir/frames" --save-audio "$clip_dir/clip.wav")
  m2 "${common[@]}" --dry-run "${outputs[@]}" > "$out/dry_run.log" 2>&1 || { cat "$out/dry_run.log"; exit 1; }
else
  cat "$out/dry_run.log"
  exit 1
fi
cat "$out/dry_run.log"

# 3. The run.
set +e
m2 "${common[@]}" "${outputs[@]}" --metrics "$out/metrics.json" 2>&1 | tee "$out/generate.log"
rc=${PIPESTATUS[0]}
set -e
echo "device_generate: generate exited $rc"
ls -la "$out" | head -20
[ "$clip_dir" = "$out" ] || { echo "clip in $clip_dir:"; ls -la "$clip_dir" | head -10; }
[ -d "$clip_dir/frames" ] && echo "frames: $(ls "$clip_dir/frames" | wc -l)"

# 4. Per-stage times.
if [ -f "$out/metrics.json" ]; then
  if command -v python3 > /dev/null; then
    python3 - "$out/metrics.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print(f"backend {m.get('backend')}, {m.get('tokens_per_forward')} tokens per forward, {m.get('steps')} steps")
for k, v in m.get("phase_ms", {}).items():
    print(f"  {k:32s} {v:12.1f} ms")
steps = m.get("step_ms", [])
if steps:
    print("  step_ms " + " ".join(f"{s:.1f}" for s in steps))
rsteps = m.get("refiner_step_ms", [])
if rsteps:
    print(f"  refiner_step_ms ({m.get('refiner_tokens_per_forward')} tokens per forward, 2 forwards a step) "
          + " ".join(f"{s:.1f}" for s in rsteps))
outs = m.get("outputs") or {}
if outs.get("video_shape"):
    print(f"  decoded video {outs['video_shape']} at {outs.get('fps')} fps, audio {outs.get('audio_shape')}")
print(f"  peak RSS {m.get('peak_rss_bytes', 0) / 1e9:.2f} GB")
plan = m.get("memory_plan", {})
print(f"  planned peak device {plan.get('peak_device_bytes', 0) / 1e9:.2f} GB ({plan.get('peak_device_phase')})")
PY
  else
    cat "$out/metrics.json"
  fi
fi
exit "$rc"
