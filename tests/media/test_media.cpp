// src/media without FFmpeg: SHA-256 known vectors, PNG and WAV round trips, the
// built-in WAV writer against libsndfile, and the output resize against digests of
// the official torch formula (make_resize_reference.py, torch 2.11 CPU).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/mmap_file.h"
#include "media/png.h"
#include "media/resize.h"
#include "media/sha256.h"
#include "media/wav.h"
#include "media_fixture.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

namespace fs = std::filesystem;

TEST(Sha256, KnownVectors) {
  // FIPS 180-2 examples.
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million.data(), million.size()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const std::string dir = temp_dir("sha");
  write_file_atomic(dir + "/m.bin", million);
  EXPECT_EQ(sha256_file_hex(dir + "/m.bin"), sha256_hex(million.data(), million.size()));
  EXPECT_TRUE(throws_with([&] { sha256_file_hex(dir + "/missing.bin"); }, {"missing.bin"}));
}

TEST(Sha256, ClipHashesAreTheRawArrayBytes) {
  Clip c = synthetic_clip(3, 8, 10, 1001);
  const ClipHashes h = clip_sha256(c);
  EXPECT_EQ(h.video, sha256_hex(c.frames.data(), 3 * 8 * 10 * 3));
  // f32 samples as in memory: little-endian IEEE (checked on this host).
  const float one = 1.0f;
  unsigned char b[4];
  std::memcpy(b, &one, 4);
  ASSERT_EQ(b[3], 0x3f);
  EXPECT_EQ(h.audio, sha256_hex(c.audio.data(), 1001 * 2 * 4));
  std::printf("  video sha256 %s\n  audio sha256 %s\n", h.video.c_str(), h.audio.c_str());
  c.audio = Tensor();
  EXPECT_TRUE(clip_sha256(c).audio.empty());
  c.frames = Tensor::zeros({3, 8, 10, 3}, DType::F32);
  EXPECT_TRUE(throws_with([&] { clip_sha256(c); }, {"sha256", "U8"}));
}

TEST(Png, FramesRoundTrip) {
  const std::string dir = temp_dir("png") + "/frames";
  const Tensor frames = gradient_frames(3, 37, 53);
  save_frames_png(dir, frames);
  EXPECT_EQ(frame_png_name(42), "frame_00042.png");
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().extension(), ".png") << e.path();  // no temporaries left
  }
  EXPECT_EQ(files, 3);
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor back = read_png_rgb(dir + "/" + frame_png_name(i));
    ASSERT_EQ(back.shape(), (Shape{37, 53, 3}));
    EXPECT_EQ(std::memcmp(back.data(), frames.data_as<uint8_t>() + i * 37 * 53 * 3, back.nbytes()), 0)
        << "frame " << i;
  }
}

TEST(Png, BadInputs) {
  const std::string dir = temp_dir("pngbad");
  write_file_atomic(dir + "/not.png", "hello, not a png");
  EXPECT_TRUE(throws_with([&] { read_png_rgb(dir + "/not.png"); }, {"not.png", "not a PNG"}));
  const std::string good = encode_png_rgb(gradient_frames(1, 9, 7).reshape({9, 7, 3}));
  write_file_atomic(dir + "/cut.png", good.substr(0, good.size() / 2));
  EXPECT_TRUE(throws_with([&] { read_png_rgb(dir + "/cut.png"); }, {"cut.png"}));
  EXPECT_TRUE(throws_with([&] { read_png_rgb(dir + "/missing.png"); }, {"missing.png"}));
  EXPECT_TRUE(throws_with([&] { save_frames_png(dir + "/f", Tensor::zeros({2, 4, 4}, DType::U8)); },
                          {"--save-frames", "[T, H, W, 3]"}));
  write_file_atomic(dir + "/file", "x");
  EXPECT_TRUE(throws_with([&] { save_frames_png(dir + "/file", gradient_frames(1, 4, 4)); },
                          {"--save-frames", "file"}));
}

// Samples with the edge cases of the PCM16 rule, each with the value that
// python-soundfile's sf.write stores (libsndfile 1.2.x with clipping on, as
// measured with sf_command(SFC_SET_CLIPPING) and sf_write_float).
struct Pcm16Case {
  float x;
  int16_t stored;
};
const Pcm16Case kPcm16Cases[] = {
    {1.0f, 32767},       {-1.0f, -32768},        {1.25f, 32767},          {-1.5f, -32768},
    {0.9f, 29491},       {0.5f, 16384},          {0.99999f, 32767},       {-0.99999f, -32768},
    {1.0000001f, 32767}, {-1.0000001f, -32768},  {1e30f, 32767},          {-1e30f, -32768},
    {0.75f / 32768.0f, 0}, {-0.75f / 32768.0f, -1}, {1.5f / 32768.0f, 1}, {2.5f / 32768.0f, 2},
};

Tensor edge_audio() {
  Tensor a = tone_audio(1000);
  float* p = a.data_as<float>();
  int i = 0;
  for (const auto& c : kPcm16Cases) p[i++] = c.x;
  return a;
}

TEST(Wav, Pcm16SampleIsSoundfilesRule) {
  for (const auto& c : kPcm16Cases) EXPECT_EQ(pcm16_sample(c.x), c.stored) << c.x;
  EXPECT_EQ(pcm16_sample(std::nanf("")), -32768);
  EXPECT_EQ(pcm16_sample(std::numeric_limits<float>::infinity()), 32767);
  EXPECT_EQ(clip_to_pcm16_range(1.5f), 32767.0f / 32768.0f);
  EXPECT_EQ(clip_to_pcm16_range(-2.0f), -1.0f);
  EXPECT_EQ(clip_to_pcm16_range(0.25f), 0.25f);
}

TEST(Wav, Float32RoundTripIsExact) {
  if (!sndfile_supported()) GTEST_SKIP() << "built without libsndfile: read_wav unavailable";
  const std::string path = temp_dir("wavf") + "/a.wav";
  const Tensor a = tone_audio(441000);
  write_wav(path, a, 44100, WavFormat::Float32);
  int sr = 0;
  const Tensor back = read_wav(path, &sr);
  EXPECT_EQ(sr, 44100);
  ASSERT_EQ(back.shape(), (Shape{441000, 2}));
  EXPECT_EQ(std::memcmp(back.data(), a.data(), a.nbytes()), 0);
}

TEST(Wav, Pcm16FollowsLibsndfileRule) {
  if (!sndfile_supported()) GTEST_SKIP() << "built without libsndfile: read_wav unavailable";
  const std::string dir = temp_dir("wavp");
  const Tensor a = edge_audio();
  write_wav(dir + "/a.wav", a, 44100);  // default: PCM16, as the official soundfile.write
  int sr = 0;
  const Tensor back = read_wav(dir + "/a.wav", &sr);
  ASSERT_EQ(back.shape(), a.shape());
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const int16_t s = pcm16_sample(a.data_as<float>()[i]);
    if (back.data_as<float>()[i] != static_cast<float>(s) / 32768.0f) ++bad;
  }
  EXPECT_EQ(bad, 0);
  // The built-in writer (used where libsndfile is absent) gives the same samples,
  // and for PCM16 the same bytes.
  for (WavFormat f : {WavFormat::Pcm16, WavFormat::Float32}) {
    const std::string p = dir + (f == WavFormat::Pcm16 ? "/b16.wav" : "/bf.wav");
    write_file_atomic(p, encode_wav_builtin(a, 44100, f));
    write_wav(dir + "/ref.wav", a, 44100, f);
    const Tensor x = read_wav(p, &sr), y = read_wav(dir + "/ref.wav", &sr);
    EXPECT_EQ(sr, 44100);
    ASSERT_EQ(x.shape(), y.shape());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0);
    if (f == WavFormat::Pcm16) {
      EXPECT_EQ(read_text_file(p), read_text_file(dir + "/ref.wav"));
    }
  }
}

TEST(Wav, Errors) {
  const std::string dir = temp_dir("wavbad");
  EXPECT_TRUE(throws_with([&] { write_wav(dir + "/a.wav", Tensor::zeros({10, 2}, DType::BF16), 44100); },
                          {"a.wav", "F32"}));
  EXPECT_TRUE(throws_with([&] { write_wav(dir + "/a.wav", tone_audio(10), 0); }, {"a.wav", "sample rate"}));
  EXPECT_TRUE(throws_with([&] { write_wav(dir + "/no/such/dir/a.wav", tone_audio(10), 44100); },
                          {"a.wav"}));
  EXPECT_TRUE(throws_with([&] { parse_wav_format("mp3"); }, {"mp3", "pcm16"}));
  EXPECT_EQ(parse_wav_format("float32"), WavFormat::Float32);
  if (sndfile_supported()) {
    write_file_atomic(dir + "/junk.wav", "RIFF....junk");
    EXPECT_TRUE(throws_with([&] { read_wav(dir + "/junk.wav", nullptr); }, {"junk.wav"}));
  }
}

struct ResizeCase {
  int64_t t, h, w, out_w, out_h;
  const char* rounding;
  const char* sha256;
};

// From make_resize_reference.py (official pipeline.py formula; "nearest" is the
// torch.round variant). Only sizes with out_h + out_w > 128: below that torch uses
// another kernel (see resize.h), so the script's two tiny cases are not checked.
const ResizeCase kResizeCases[] = {
    {2, 256, 448, 224, 128, "truncate", "84aaae7ff2e5c34c040cb32376f1c6bbe70bec82086578084785ad72e3bada18"},
    {2, 256, 448, 224, 128, "nearest", "a3b4b5bc558ec144529397d5fb743a35d95da776b5dff3065fc789172ef641ff"},
    {2, 64, 112, 160, 96, "truncate", "483e2bfad8515af8a5813f30596f2ccb56c6678beeb352656caf14bab0a9bf59"},
    {2, 64, 112, 160, 96, "nearest", "f54678d495e44a98777b51b83cc9cead9d79bbe4c78078d1e801b724b54ebb04"},
    {2, 64, 112, 301, 77, "truncate", "cabd81362c89488a045cd2bb9ef41be0a81585823ad47a7bee2928efe1b980b7"},
    {2, 64, 112, 301, 77, "nearest", "364aa682329f0c2ea8b1b7cf9d4d81a86820f267b7784d5c9d2bb380d7a58f49"},
};

TEST(Resize, MatchesOfficialTorchFormulaBitExactly) {
  for (const auto& c : kResizeCases) {
    const bool nearest = std::string(c.rounding) == "nearest";
    const Tensor out = resize_frames_bilinear(gradient_frames(c.t, c.h, c.w), c.out_w, c.out_h,
                                              nearest ? ResizeRounding::Nearest : ResizeRounding::Truncate);
    ASSERT_EQ(out.shape(), (Shape{c.t, c.out_h, c.out_w, 3}));
    EXPECT_EQ(tensor_sha256_hex(out), c.sha256)
        << c.h << "x" << c.w << " -> " << c.out_h << "x" << c.out_w << " " << c.rounding;
  }
}

TEST(Resize, IdentityAndErrors) {
  const Tensor f = gradient_frames(2, 6, 8);
  EXPECT_EQ(resize_frames_bilinear(f, 8, 6).data(), f.data());
  EXPECT_TRUE(throws_with([&] { resize_frames_bilinear(f, 0, 6); }, {"output resize", "0x6"}));
  EXPECT_TRUE(throws_with([&] { resize_frames_bilinear(Tensor::zeros({2, 6, 8, 4}, DType::U8), 4, 4); },
                          {"output resize", "[T, H, W, 3]"}));
}

}  // namespace
}  // namespace magi2::test
