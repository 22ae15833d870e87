// Synthetic clips for the media tests: moving colour gradients and a stereo tone,
// deterministic functions of the indices (no RNG).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "media/clip.h"

namespace magi2::test {

/// U8 [t, h, w, 3]: red ramps along x and moves 4 px per frame, green ramps along
/// y, blue is a diagonal band moving the other way.
inline Tensor gradient_frames(int64_t t, int64_t h, int64_t w) {
  Tensor f = Tensor::empty({t, h, w, 3}, DType::U8);
  uint8_t* p = f.data_as<uint8_t>();
  for (int64_t i = 0; i < t; ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        uint8_t* px = p + ((i * h + y) * w + x) * 3;
        px[0] = static_cast<uint8_t>((x * 255 / std::max<int64_t>(w - 1, 1) + 4 * i) & 255);
        px[1] = static_cast<uint8_t>(y * 255 / std::max<int64_t>(h - 1, 1));
        px[2] = static_cast<uint8_t>(((x + y) / 2 + 256 - (3 * i) % 256) & 255);
      }
  return f;
}

/// F32 [n, 2]: a `hz` tone, left sin at amplitude 0.5, right cos at 0.25.
inline Tensor tone_audio(int64_t n, double hz = 440.0, int sample_rate = 44100) {
  Tensor a = Tensor::empty({n, 2}, DType::F32);
  float* p = a.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double ph = 2.0 * M_PI * hz * static_cast<double>(i) / sample_rate;
    p[2 * i] = static_cast<float>(0.5 * std::sin(ph));
    p[2 * i + 1] = static_cast<float>(0.25 * std::cos(ph));
  }
  return a;
}

/// A clip of `frames` frames at 12.5 fps with `samples` stereo samples at 44.1 kHz.
inline Clip synthetic_clip(int64_t frames, int64_t h, int64_t w, int64_t samples) {
  Clip c;
  c.frames = gradient_frames(frames, h, w);
  c.fps = 12.5;
  c.audio = tone_audio(samples);
  c.sample_rate = 44100;
  return c;
}

}  // namespace magi2::test
