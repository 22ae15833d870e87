// WAV audio (`--save-audio FILE.wav`). The official pipeline (pipeline.py
// _mux_audio) writes the waveform with soundfile's defaults, i.e. libsndfile
// PCM_16, before muxing it into the MP4; PCM16 is therefore the default here and
// float32 is the lossless alternative.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace magi2 {

/// WAV sample encodings.
enum class WavFormat {
  /// 16-bit PCM exactly as python-soundfile's `sf.write` writes it: soundfile
  /// turns libsndfile's clipping on (SFC_SET_CLIPPING) for every file it opens,
  /// so the rule is libsndfile 1.2.x's clipped float -> PCM16 conversion
  /// (pcm16_sample below), for in-range and out-of-range samples alike.
  Pcm16,
  /// 32-bit IEEE float (WAVE_FORMAT_IEEE_FLOAT), bit-exact copy of the samples.
  Float32,
};

/// One float sample as the PCM16 value soundfile/libsndfile (1.2.0-1.2.2,
/// clipping on) store: s = x * 2^31 in fp32; s >= 2^31 - 1 -> 32767;
/// s <= -2^31 -> -32768; otherwise the fp32 -> int32 conversion (round half to
/// even; NaN -> INT32_MIN) shifted right by 16 (so the result rounds towards
/// -inf at 16-bit precision: 0.9 -> 29491, -1.0 -> -32768, 1.0 -> 32767,
/// NaN -> -32768).
int16_t pcm16_sample(float x);

/// The float the MP4's AAC encoder gets for a sample: clipped to the range
/// PCM16 represents, [-1, 32767/32768], with the same thresholds as
/// pcm16_sample (so the MP4 audio clips where the WAV does; in-range samples
/// pass unchanged). NaN is passed through (the engine refuses non-finite audio
/// before any output is written).
float clip_to_pcm16_range(float x);

/// Parses "pcm16" / "float32" (the CLI's --audio-format); Error naming the flag
/// and the value otherwise.
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
