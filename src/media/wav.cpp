#include "media/wav.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "io/mmap_file.h"

#if MAGI2_HAVE_SNDFILE
#include <sndfile.h>
#endif

namespace magi2 {
namespace {

void check_wav_input(const std::string& path, const Tensor& audio, int sample_rate) {
  MAGI2_CHECK(audio.defined() && audio.device() == Device::CPU && audio.dtype() == DType::F32 &&
                  audio.dim() == 2 && audio.size(1) >= 1 && audio.is_contiguous(),
              "wav '", path, "': audio must be a contiguous CPU F32 [N, C] tensor, got ",
              dtype_name(audio.dtype()), " ", shape_str(audio.shape()));
  MAGI2_CHECK(sample_rate > 0, "wav '", path, "': bad sample rate ", sample_rate);
  // RIFF sizes are 32-bit.
  MAGI2_CHECK(audio.nbytes() < (1ull << 31), "wav '", path, "': audio too long for a WAV file");
}

#if MAGI2_HAVE_SNDFILE

// libsndfile virtual I/O over a growing in-memory buffer, so the finished file
// can be written atomically.
struct MemFile {
  std::string bytes;
  sf_count_t pos = 0;
};
sf_count_t mem_size(void* user) { return static_cast<sf_count_t>(static_cast<MemFile*>(user)->bytes.size()); }
sf_count_t mem_seek(sf_count_t off, int whence, void* user) {
  auto* m = static_cast<MemFile*>(user);
  sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : static_cast<sf_count_t>(m->bytes.size());
  m->pos = base + off;
  return m->pos;
}
sf_count_t mem_read(void* ptr, sf_count_t n, void* user) {
  auto* m = static_cast<MemFile*>(user);
  const auto size = static_cast<sf_count_t>(m->bytes.size());
  sf_count_t k = m->pos >= size ? 0 : std::min(n, size - m->pos);
  if (k > 0) std::memcpy(ptr, m->bytes.data() + m->pos, static_cast<size_t>(k));
  m->pos += k;
  return k;
}
sf_count_t mem_write(const void* ptr, sf_count_t n, void* user) {
  auto* m = static_cast<MemFile*>(user);
  const auto end = static_cast<size_t>(m->pos + n);
  if (m->bytes.size() < end) m->bytes.resize(end);
  std::memcpy(m->bytes.data() + m->pos, ptr, static_cast<size_t>(n));
  m->pos += n;
  return n;
}
sf_count_t mem_tell(void* user) { return static_cast<MemFile*>(user)->pos; }

std::string encode_wav_sndfile(const std::string& path, const Tensor& audio, int sample_rate,
                               WavFormat format) {
  SF_VIRTUAL_IO io{mem_size, mem_seek, mem_read, mem_write, mem_tell};
  MemFile mem;
  SF_INFO info{};
  info.samplerate = sample_rate;
  info.channels = static_cast<int>(audio.size(1));
  info.format = SF_FORMAT_WAV | (format == WavFormat::Pcm16 ? SF_FORMAT_PCM_16 : SF_FORMAT_FLOAT);
  SNDFILE* sf = sf_open_virtual(&io, SFM_WRITE, &info, &mem);
  MAGI2_CHECK(sf, "wav '", path, "': ", sf_strerror(nullptr));
  sf_command(sf, SFC_SET_CLIPPING, nullptr, SF_TRUE);  // as python-soundfile does for every file
  const sf_count_t frames = audio.size(0);
  const sf_count_t written = sf_writef_float(sf, audio.data_as<float>(), frames);
  const std::string err = sf_strerror(sf);
  const int rc = sf_close(sf);
  MAGI2_CHECK(written == frames && rc == 0, "wav '", path, "': libsndfile: ", err);
  return std::move(mem.bytes);
}

#endif  // MAGI2_HAVE_SNDFILE

void put_u16(std::string& s, uint16_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>(v >> 8));
}
void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

// Non-PCM WAVE formats require the 'fact' chunk, hence its presence for float.
std::string encode_wav_builtin(const Tensor& audio, int sample_rate, WavFormat format) {
  check_wav_input("(memory)", audio, sample_rate);
  const bool pcm = format == WavFormat::Pcm16;
  const auto channels = static_cast<uint16_t>(audio.size(1));
  const auto frames = static_cast<uint32_t>(audio.size(0));
  const uint16_t bytes_per_sample = pcm ? 2 : 4;
  const uint32_t data_bytes = frames * channels * bytes_per_sample;
  const uint32_t fmt_bytes = pcm ? 16 : 18;
  const uint32_t riff_bytes = 4 + (8 + fmt_bytes) + (pcm ? 0 : 12) + (8 + data_bytes);
  std::string s;
  s.reserve(riff_bytes + 8);
  s += "RIFF";
  put_u32(s, riff_bytes);
  s += "WAVEfmt ";
  put_u32(s, fmt_bytes);
  put_u16(s, pcm ? 1 : 3);  // WAVE_FORMAT_PCM / WAVE_FORMAT_IEEE_FLOAT
  put_u16(s, channels);
  put_u32(s, static_cast<uint32_t>(sample_rate));
  put_u32(s, static_cast<uint32_t>(sample_rate) * channels * bytes_per_sample);
  put_u16(s, static_cast<uint16_t>(channels * bytes_per_sample));
  put_u16(s, static_cast<uint16_t>(8 * bytes_per_sample));
  if (!pcm) {
    put_u16(s, 0);  // cbSize
    s += "fact";
    put_u32(s, 4);
    put_u32(s, frames);
  }
  s += "data";
  put_u32(s, data_bytes);
  const float* x = audio.data_as<float>();
  const size_t n = static_cast<size_t>(frames) * channels;
  for (size_t i = 0; i < n; ++i) {
    if (pcm) {
      put_u16(s, static_cast<uint16_t>(pcm16_sample(x[i])));
    } else {
      put_u32(s, f32_bits(x[i]));
    }
  }
  return s;
}

int16_t pcm16_sample(float x) {
  // libsndfile scales to the int32 range in fp32 and keeps the top 16 bits.
  const float scaled = x * 2147483648.0f;
  if (static_cast<double>(scaled) >= 2147483647.0) return 32767;
  if (static_cast<double>(scaled) <= -2147483648.0) return -32768;
  // SSE2 cvtss2si: round half to even, NaN -> INT32_MIN.
  const int32_t v = std::isnan(scaled) ? INT32_MIN : static_cast<int32_t>(std::lrintf(scaled));
  return static_cast<int16_t>(v >> 16);
}

float clip_to_pcm16_range(float x) {
  const float scaled = x * 2147483648.0f;
  if (static_cast<double>(scaled) >= 2147483647.0) return 32767.0f / 32768.0f;
  if (static_cast<double>(scaled) <= -2147483648.0) return -1.0f;
  return x;
}

WavFormat parse_wav_format(const std::string& s) {
  if (s == "pcm16") return WavFormat::Pcm16;
  if (s == "float32") return WavFormat::Float32;
  throw Error(str_cat("--audio-format must be pcm16 or float32, got '", s, "'"));
}

bool sndfile_supported() { return MAGI2_HAVE_SNDFILE != 0; }

void write_wav(const std::string& path, const Tensor& audio, int sample_rate, WavFormat format) {
  check_wav_input(path, audio, sample_rate);
#if MAGI2_HAVE_SNDFILE
  write_file_atomic(path, encode_wav_sndfile(path, audio, sample_rate, format));
#else
  write_file_atomic(path, encode_wav_builtin(audio, sample_rate, format));
#endif
}

Tensor read_wav(const std::string& path, int* sample_rate) {
#if MAGI2_HAVE_SNDFILE
  SF_INFO info{};
  SNDFILE* sf = sf_open(path.c_str(), SFM_READ, &info);
  MAGI2_CHECK(sf, "cannot read audio '", path, "': ", sf_strerror(nullptr));
  struct Closer {
    SNDFILE* f;
    ~Closer() { sf_close(f); }
  } closer{sf};
  MAGI2_CHECK(info.channels >= 1 && info.frames >= 0, "audio '", path, "': bad header");
  Tensor out = Tensor::empty({static_cast<int64_t>(info.frames), info.channels}, DType::F32);
  const sf_count_t got = sf_readf_float(sf, out.data_as<float>(), info.frames);
  MAGI2_CHECK(got == info.frames, "audio '", path, "': truncated (", got, " of ", info.frames,
              " frames)");
  if (sample_rate) *sample_rate = info.samplerate;
  return out;
#else
  (void)sample_rate;
  throw Error(str_cat("cannot read audio '", path, "': this build has no libsndfile (install libsndfile1-dev and rebuild)"));
#endif
}

}  // namespace magi2
