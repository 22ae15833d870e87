#include "pipeline/time_embedding.h"

#include <cmath>

#include "core/error.h"

namespace magi2 {

namespace {

// Frequencies of the release width (dim 64, half 32) exactly as the official
// GPU run produced them: CUDA expf of f32(f32(-ln 10000) * i) * (1/32), measured
// with nvcc on an H200 (the golden came from torch cu130). CUDA expf is not
// correctly rounded; at i = 3, 5, 8, 11, 13, 15, 17, 22, 25, 29 it is 1 ulp away
// from the correctly rounded value, and at pos ~ 800 a 1-ulp frequency error
// moves cos/sin by up to 6e-5. The golden time embeddings (dit_tiny dit_io)
// reproduce only with these values.
constexpr float kCudaFreq64[32] = {
    0x1p+0f, 0x1.7ff222p-1f, 0x1.1feb34p-1f, 0x1.afd136p-2f,
    0x1.43d136p-2f, 0x1.e5a846p-3f, 0x1.6c310ep-3f, 0x1.111aeep-3f,
    0x1.99999ap-4f, 0x1.33281ap-4f, 0x1.ccab82p-5f, 0x1.59742cp-5f,
    0x1.030dc4p-5f, 0x1.84869ep-6f, 0x1.235a72p-6f, 0x1.b4f7e4p-7f,
    0x1.47ae14p-7f, 0x1.eb735cp-8f, 0x1.708934p-8f, 0x1.145ceap-8f,
    0x1.9e7c66p-9f, 0x1.36d21ap-9f, 0x1.d22a52p-10f, 0x1.5d931cp-10f,
    0x1.0624dcp-10f, 0x1.892916p-11f, 0x1.26d428p-11f, 0x1.ba2e42p-12f,
    0x1.4b96c2p-12f, 0x1.f15018p-13f, 0x1.74eea6p-13f, 0x1.17a8dap-13f,
};

}  // namespace

float normalize_timestep(float timestep) {
  // The reciprocal is itself an fp32 quotient (PyTorch's opmath for float).
  const float inv = 1.0f / 1000.0f;
  return timestep * inv;
}

void sinusoidal_embedding(float tau, int64_t dim, float* out) {
  MAGI2_CHECK(dim >= 1, "sinusoidal_embedding: dim must be >= 1, got ", dim);
  const float pos = tau * 1000.0f;
  const int64_t half = dim / 2;
  // -ln(10000) enters the kernel as an fp32 scalar; the product with the fp32
  // arange is rounded before the division by `half`, which CUDA PyTorch turns
  // into a multiply by f32(1/half) (exact for the release half = 32).
  const float neg_log = static_cast<float>(-std::log(10000.0));
  const float inv_half = half > 0 ? 1.0f / static_cast<float>(half) : 0.0f;
  for (int64_t i = 0; i < half; ++i) {
    const float expo = (neg_log * static_cast<float>(i)) * inv_half;
    const float freq = half == 32 ? kCudaFreq64[i]
                                  : static_cast<float>(std::exp(static_cast<double>(expo)));
    const float arg = pos * freq;
    out[i] = static_cast<float>(std::cos(static_cast<double>(arg)));
    out[half + i] = static_cast<float>(std::sin(static_cast<double>(arg)));
  }
  if (dim % 2) out[dim - 1] = 0.0f;
}

}  // namespace magi2
