// What `magi2 generate` does with a decoded clip: optional resize, then any of
// MP4 / PNG frames / WAV, plus the SHA-256 digests for the metrics JSON
// (spec magi2-pipeline.md §7). One plan, checked before any work, one call after.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "media/clip.h"
#include "media/mp4.h"
#include "media/resize.h"
#include "media/sha256.h"
#include "media/wav.h"

namespace magi2 {

/// The requested outputs (CLI flags in brackets). Empty path = not requested.
struct OutputPlan {
  std::string mp4_path;                    ///< [-o FILE.mp4]
  std::string frames_dir;                  ///< [--save-frames DIR]: DIR/frame_00000.png, ...
  std::string wav_path;                    ///< [--save-audio FILE.wav]
  WavFormat wav_format = WavFormat::Pcm16;  ///< [--audio-format pcm16|float32]
  int64_t output_width = 0;                ///< [--output-width]; 0 = decoded size
  int64_t output_height = 0;               ///< [--output-height]; both or neither
  ResizeRounding resize_rounding = ResizeRounding::Truncate;
  Mp4Options mp4;                          ///< encoder settings (defaults: mp4.h)
};

/// Validates `plan` for a clip decoded at `width` x `height`, before any model work.
/// Errors (one line naming the flag): MP4 requested in a build without FFmpeg (the
/// message points at --save-frames/--save-audio), only one of --output-width /
/// --output-height, a size < 1, an odd final size with MP4, an MP4 path not ending
/// in .mp4, a missing or unwritable parent directory of an output.
void check_output_plan(const OutputPlan& plan, int64_t width, int64_t height);

/// What write_outputs produced.
struct OutputReport {
  ClipHashes hashes;        ///< of the arrays as written (after the resize, if any)
  std::string video_sha256_decoded;  ///< of the frames before the resize ("" without resize)
  Shape video_shape, audio_shape;
  double fps = 0;
  int sample_rate = 0;
  std::string mp4_sha256;   ///< of the MP4 file's bytes ("" when no MP4)
  int64_t mp4_bytes = 0;
  double resize_ms = 0, mp4_ms = 0, frames_ms = 0, wav_ms = 0, hash_ms = 0;
  /// The "outputs" object of the metrics JSON (keys documented in docs/media.md).
  nlohmann::json to_json(const OutputPlan& plan) const;
};

/// Resizes (if asked), hashes, and writes every requested output (each atomically).
/// `clip` as Clip documents (audio may be undefined: no WAV, video-only MP4; a WAV
/// request then fails). Errors name the output at fault.
OutputReport write_outputs(const Clip& clip, const OutputPlan& plan);

}  // namespace magi2
