// Fourier-domain resampling of the decoded waveform from the VAE's 51.2 kHz
// timeline to 44.1 kHz (spec magi2-pipeline.md §6.2; official
// inference/pipeline/audio_decoder.py resample_audio_sinc, which is
// scipy.signal.resample). Host-side post-processing on FFTW3 (Debian
// libfftw3-dev), not a model op.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace magi2 {

/// Resamples each channel (column) of x [N, C] f32 to m samples as
/// scipy.signal.resample does for real input: X = rfft(x), keep bins
/// [0, min(N, m)/2]; when min(N, m) is even, the bin at min(N, m)/2 is doubled
/// when downsampling (m < N) or halved when upsampling (m > N);
/// y = irfft_m(Y) * (m / N) with the 1/m inverse normalisation (the imaginary
/// parts of the DC and Nyquist bins are dropped by the real inverse). The
/// transforms run in float64 (FFTW_ESTIMATE plans: the same bytes on every run);
/// the inverse result is rounded to f32 and then scaled by f32(m / N), as scipy
/// does on float32 input. Returns [m, C] f32. Errors: x not 2-D contiguous f32
/// on the CPU, N < 1, m < 1.
Tensor fourier_resample(const Tensor& x, int64_t m);

}  // namespace magi2
