// Diffusion-time channels of the MAGI-2 DiT input (`time_token_sequence`).
// Spec: magi2-pipeline.md §4.5 and Appendix B, magi2-dit.md §3.7; official
// inference/model/magi2_preview.py (sinusoidal_embedding_1d) and
// inference/pipeline/sampler.py (prepare_model_input: t / 1000).
#pragma once

#include <cstdint>

namespace magi2 {

/// Width of the time embedding the release DiT consumes (`time_channel_dim`).
constexpr int64_t kTimeChannels = 64;

/// Normalised diffusion time of the video/audio tokens for a scheduler timestep.
/// `timestep` is the scheduler value already converted to fp32 (exact for the
/// integer timesteps of FlowUniPC, < 2^24). The official sampler divides an fp32
/// CUDA tensor by the Python scalar 1000.0, which PyTorch evaluates as a multiply
/// by f32(1/1000); this function reproduces that rounding, so e.g. 999 maps to
/// 0.999000072 rather than f32(0.999). Returns f32(timestep * f32(0.001)).
float normalize_timestep(float timestep);

/// Sinusoidal embedding of one normalised time `tau` (the official
/// sinusoidal_embedding_1d for a single position), all in fp32:
/// pos = f32(tau * 1000); freq[i] = exp(f32(f32(-ln 10000) * i) * f32(1/half)), half = dim / 2;
/// out = [cos(pos * freq[0..half)), sin(pos * freq[0..half))] (cos block first), and a
/// trailing 0 when `dim` is odd. For dim 64 (the release) freq is the table CUDA
/// expf produced in the official GPU run (1 ulp off the correctly rounded value at
/// 10 of 32 entries, so pos * freq is bit-identical to the official argument; spec
/// Appendix B lists the correctly rounded values instead); other widths use
/// correctly rounded exp. cos/sin are evaluated in double and rounded to fp32
/// (CUDA cosf/sinf are within 2 ulp of that; observed <= 1 ulp).
/// `out` must hold `dim` floats. Errors: Error when dim < 1.
void sinusoidal_embedding(float tau, int64_t dim, float* out);

}  // namespace magi2
