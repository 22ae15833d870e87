// The decoded output of one generation: uint8 RGB frames and stereo f32 audio,
// as the pipeline hands them to the writers (spec magi2-pipeline.md §7.1:
// payload.video [T,H,W,3] uint8, payload.audio [N,2] f32, fps 12.5, 44 100 Hz).
#pragma once

#include <string>

#include "core/tensor.h"

namespace magi2 {

/// Frame rate of MAGI-2 Preview output (spec §7.1 `metadata.video.fps`; official
/// pipeline.py `config.fps`). Exactly 25/2: the writers use the rational form.
constexpr int kClipFpsNum = 25;
constexpr int kClipFpsDen = 2;
/// Audio sample rate of the official audio VAE (spec §7.1 `metadata.audio.sample_rate`).
constexpr int kClipSampleRate = 44100;

/// One generated clip.
/// - `frames`: [T, H, W, 3] U8, RGB, contiguous CPU (T >= 1, H, W >= 1).
/// - `fps`: frames per second; 12.5 for MAGI-2 (25 for the refiner's doubled rate).
/// - `audio`: [N, 2] F32, interleaved stereo (row = one sample instant, columns
///   left/right), contiguous CPU; nominal range [-1, 1], not clipped here.
///   May be undefined (no audio stream).
/// - `sample_rate`: Hz of `audio`.
struct Clip {
  Tensor frames;
  double fps = 12.5;
  Tensor audio;
  int sample_rate = kClipSampleRate;
};

/// Throws Error("<what>: ...") unless `frames` is a contiguous CPU U8 [T,H,W,3]
/// tensor with T, H, W >= 1.
void check_frames(const Tensor& frames, const std::string& what);
/// Throws Error("<what>: ...") unless `audio` is a contiguous CPU F32 [N,2] tensor
/// with N >= 1 and `sample_rate` > 0.
void check_audio(const Tensor& audio, int sample_rate, const std::string& what);

}  // namespace magi2
