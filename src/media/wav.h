// WAV audio (`--save-audio FILE.wav`). The official pipeline (pipeline.py
// _mux_audio) writes the waveform with soundfile's defaults, i.e. libsndfile
// PCM_16, before muxing it into the MP4; PCM16 is therefore the default here and
// float32 is the lossless alternative.
#pragma once

#include <string>

#include "core/tensor.h"

namespace magi2 {

/// WAV sample encodings.
enum class WavFormat {
  /// 16-bit PCM, libsndfile's float->int16 rule: lrintf(32767.0f * x) stored as
  /// int16, with libsndfile's default clipping (off), as soundfile.write does
  /// (so |x| > 1 wraps around, exactly as the official side file would).
  Pcm16,
  /// 32-bit IEEE float (WAVE_FORMAT_IEEE_FLOAT), bit-exact copy of the samples.
  Float32,
};

/// Parses "pcm16" / "float32" (CLI spelling); Error naming the value otherwise.
WavFormat parse_wav_format(const std::string& s);

/// True when the build has libsndfile (MAGI2_HAVE_SNDFILE): then write_wav uses it
/// and read_wav works. Without it write_wav uses a small built-in RIFF writer
/// with the same sample conversion (the GPU image has no libsndfile).
bool sndfile_supported();

/// Writes `audio` (F32 [N, C], interleaved, contiguous CPU, C >= 1) at `sample_rate`
/// Hz to `path` as a RIFF/WAVE file, atomically (temporary file, then rename).
/// Error naming the path on bad input or when it cannot be written.
void write_wav(const std::string& path, const Tensor& audio, int sample_rate,
               WavFormat format = WavFormat::Pcm16);

/// The built-in RIFF/WAVE encoder write_wav falls back to without libsndfile
/// (compiled in every build, so tests compare it with libsndfile): canonical
/// 16-byte 'fmt ' chunk for PCM16; for float an 18-byte 'fmt ' (format 3) and a
/// 'fact' chunk. Same sample values as libsndfile for both formats.
std::string encode_wav_builtin(const Tensor& audio, int sample_rate, WavFormat format);

/// Reads any libsndfile-readable audio file as F32 [N, C] (libsndfile's
/// normalisation: PCM16 / 32768), sample rate into *sample_rate. Error naming the
/// path when missing/corrupt, or when the build has no libsndfile.
Tensor read_wav(const std::string& path, int* sample_rate);

}  // namespace magi2
