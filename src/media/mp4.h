// MP4 (H.264 + AAC) through the FFmpeg libraries, in process. Optional at build
// time (MAGI2_HAVE_FFMPEG, found with pkg-config): without it write_mp4 throws
// and the CLI offers --save-frames + --save-audio instead.
//
// Settings (spec magi2-pipeline.md §7.2; official pipeline.py _save_video /
// _mux_audio; vLLM-Omni mux_video_audio_bytes):
// - video: libx264, yuv420p, CRF 18 (vLLM-Omni; upstream's imageio quality=8 is
//   CRF 10), x264 preset "medium" (the default of both), frames fed as rgb24 and
//   converted by swscale with bicubic chroma filtering and BT.601 limited-range
//   coefficients (the ffmpeg/PyAV default conversion); time base = 1/fps exactly
//   (2/25 for 12.5 fps), one frame per tick. We also tag the stream BT.601
//   (smpte170m, tv range) so players decode with the matrix that was used; the
//   official files are untagged.
// - audio: FFmpeg's native AAC encoder, 44.1 kHz stereo, 128 kb/s (the encoder's
//   own stereo default that both official paths get), fed the f32 samples directly
//   (as vLLM-Omni; upstream goes through a PCM16 WAV first). Frames of 1024 samples
//   with a short last frame, so the stream holds exactly N samples: the 1024-sample
//   encoder priming is hidden by the MP4 edit list and the last packet lasts only
//   the remaining samples; the movie timescale is the sample rate (not FFmpeg's
//   1000), so the edit lists do not round the durations to milliseconds: the audio
//   track lasts N / sample_rate and the video T / fps, exactly.
// - container: MP4, "encoder" tag = the libavformat version (as the ffmpeg CLI
//   writes); written to PATH.tmp.<pid> and renamed to PATH when complete.
#pragma once

#include <string>

#include "media/clip.h"

namespace magi2 {

/// Encoder settings for write_mp4 (defaults as documented above).
struct Mp4Options {
  int crf = 18;                      ///< libx264 constant rate factor, 0..51
  std::string preset = "medium";     ///< libx264 preset
  int audio_bitrate = 128000;        ///< AAC bits per second
  /// libx264 thread count. Fixed (not "auto") because x264's output depends on
  /// it: the same settings then give the same bytes on any machine.
  int x264_threads = 8;
};

/// True when this build can write MP4 (FFmpeg found at build time and its
/// libavcodec has the libx264 and aac encoders).
bool mp4_supported();

/// Short description of the FFmpeg libraries in use ("libavformat 59.27.100, ...")
/// or "FFmpeg not available in this build".
std::string mp4_library_versions();

/// Writes `clip` as an MP4 to `path` (atomically). Video: `clip.frames` (see Clip;
/// width and height must be even for yuv420p). Audio: `clip.audio` when defined.
/// `clip.fps` must be a positive rational with a denominator <= 1001 (12.5 -> 25/2).
/// Errors (one line naming `path`): no FFmpeg in this build (says to use
/// --save-frames and --save-audio), bad tensors, odd size, encoder/muxer failures.
void write_mp4(const std::string& path, const Clip& clip, const Mp4Options& options = {});

}  // namespace magi2
