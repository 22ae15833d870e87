// Image decoding (io/image.h): PIL's convert("RGB") rules per PNG layout, JPEG
// decoding, EXIF orientation (JPEG APP1 and PNG eXIf), one-line errors; and
// the PIL LANCZOS resize's trivial cases (io/image_resize.h; the bit-exact
// comparison with PIL is in tests/golden/test_wan22_encoder_golden.cpp).
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "io/image.h"
#include "io/image_resize.h"
#include "pipeline/reference_image.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

struct PngSpec {
  int w = 0, h = 0, color = PNG_COLOR_TYPE_RGB, depth = 8;
  std::vector<uint8_t> bytes;  // packed rows as libpng expects them
  std::vector<png_color> palette;
  std::vector<uint8_t> trns;
  bool interlace = false;
  std::vector<uint8_t> exif;
};

std::string write_png(const std::string& path, const PngSpec& s) {
  FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_TRUE(f);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, f);
  png_set_IHDR(png, info, s.w, s.h, s.depth, s.color, s.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), static_cast<int>(s.palette.size()));
  if (!s.trns.empty()) png_set_tRNS(png, info, s.trns.data(), static_cast<int>(s.trns.size()), nullptr);
  if (!s.exif.empty()) png_set_eXIf_1(png, info, static_cast<png_uint_32>(s.exif.size()),
                                      const_cast<png_bytep>(s.exif.data()));
  png_write_info(png, info);
  const size_t stride = s.bytes.size() / s.h;
  std::vector<png_bytep> rows(s.h);
  for (int y = 0; y < s.h; ++y) rows[y] = const_cast<png_bytep>(s.bytes.data() + y * stride);
  png_write_image(png, rows.data());
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
  return path;
}

std::string write_jpeg(const std::string& path, int w, int h, int comps, const std::vector<uint8_t>& px,
                       const std::vector<uint8_t>& app1 = {}) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_TRUE(f);
  jpeg_stdio_dest(&c, f);
  c.image_width = w;
  c.image_height = h;
  c.input_components = comps;
  c.in_color_space = comps == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  jpeg_start_compress(&c, TRUE);
  if (!app1.empty()) jpeg_write_marker(&c, JPEG_APP0 + 1, app1.data(), static_cast<unsigned>(app1.size()));
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(px.data() + c.next_scanline * w * comps);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::fclose(f);
  return path;
}

// A minimal big- or little-endian TIFF block with IFD0 = {Orientation: v}.
std::vector<uint8_t> exif_block(int v, bool big, bool jpeg_prefix) {
  std::vector<uint8_t> b;
  if (jpeg_prefix) b = {'E', 'x', 'i', 'f', 0, 0};
  auto u16 = [&](int x) {
    if (big) { b.push_back(x >> 8); b.push_back(x & 255); } else { b.push_back(x & 255); b.push_back(x >> 8); }
  };
  auto u32 = [&](uint32_t x) {
    for (int i = 0; i < 4; ++i) b.push_back(big ? (x >> (24 - 8 * i)) & 255 : (x >> (8 * i)) & 255);
  };
  b.push_back(big ? 'M' : 'I');
  b.push_back(big ? 'M' : 'I');
  u16(42);
  u32(8);
  u16(1);                   // one entry
  u16(0x0112); u16(3); u32(1);  // Orientation, SHORT, count 1
  u16(v); u16(0);           // value, padding
  u32(0);                   // no next IFD
  return b;
}

Tensor rgb_of(int h, int w, std::vector<uint8_t> v) {
  Tensor t = Tensor::empty({h, w, 3}, DType::U8);
  std::memcpy(t.data(), v.data(), v.size());
  return t;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  return std::vector<uint8_t>(t.data_as<uint8_t>(), t.data_as<uint8_t>() + t.numel());
}

TEST(ImagePng, LayoutsMapToRgbLikePil) {
  const std::string dir = temp_dir("image_png");
  {  // RGBA: alpha dropped, no compositing
    PngSpec s{2, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8, {10, 20, 30, 0, 40, 50, 60, 128}};
    EXPECT_EQ(bytes_of(load_image_rgb(write_png(dir + "/rgba.png", s))), (std::vector<uint8_t>{10, 20, 30, 40, 50, 60}));
  }
  {  // gray 4-bit: scaled by 17, replicated
    PngSpec s{2, 1, PNG_COLOR_TYPE_GRAY, 4, {0x3F}};
    EXPECT_EQ(bytes_of(load_image_rgb(write_png(dir + "/g4.png", s))),
              (std::vector<uint8_t>{51, 51, 51, 255, 255, 255}));
  }
  {  // gray 16-bit: PIL's I;16 -> RGB clips at 255 rather than scaling
    PngSpec s{3, 1, PNG_COLOR_TYPE_GRAY, 16, {0x00, 0x7B, 0x01, 0x00, 0xFF, 0xFF}};
    EXPECT_EQ(bytes_of(load_image_rgb(write_png(dir + "/g16.png", s))),
              (std::vector<uint8_t>{123, 123, 123, 255, 255, 255, 255, 255, 255}));
  }
  {  // RGB 16-bit: high byte
    PngSpec s{1, 1, PNG_COLOR_TYPE_RGB, 16, {0x12, 0xFF, 0x34, 0x00, 0xAB, 0x80}};
    EXPECT_EQ(bytes_of(load_image_rgb(write_png(dir + "/rgb16.png", s))), (std::vector<uint8_t>{0x12, 0x34, 0xAB}));
  }
  {  // gray + alpha 8-bit
    PngSpec s{1, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, {77, 3}};
    EXPECT_EQ(bytes_of(load_image_rgb(write_png(dir + "/ga.png", s))), (std::vector<uint8_t>{77, 77, 77}));
  }
  {  // palette with transparency: colours only
    PngSpec s{2, 1, PNG_COLOR_TYPE_PALETTE, 8, {1, 0}};
    s.palette = {{1, 2, 3}, {200, 100, 50}};
    s.trns = {0, 10};
    EXPECT_EQ(bytes_of(load_image_rgb(write_png(dir + "/pal.png", s))),
              (std::vector<uint8_t>{200, 100, 50, 1, 2, 3}));
  }
  {  // interlaced RGB
    PngSpec s{3, 3, PNG_COLOR_TYPE_RGB, 8, {}};
    for (int i = 0; i < 27; ++i) s.bytes.push_back(static_cast<uint8_t>(i * 9));
    s.interlace = true;
    EXPECT_EQ(bytes_of(load_image_rgb(write_png(dir + "/il.png", s))), s.bytes);
  }
}

TEST(ImageExif, OrientationParserBothByteOrders) {
  for (bool big : {false, true})
    for (int v = 1; v <= 8; ++v) {
      const auto b = exif_block(v, big, false);
      EXPECT_EQ(exif_orientation(b.data(), b.size()), v);
    }
  const uint8_t junk[10] = {'X', 'X', 0, 42, 0, 0, 0, 8, 0, 0};
  EXPECT_EQ(exif_orientation(junk, sizeof(junk)), 1);
  const auto truncated = exif_block(6, true, false);
  EXPECT_EQ(exif_orientation(truncated.data(), 12), 1);
}

TEST(ImageExif, TransposesLikePil) {
  // 2 rows x 3 columns, pixel value = 10*row + col in every channel.
  std::vector<uint8_t> v;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x)
      for (int c = 0; c < 3; ++c) v.push_back(static_cast<uint8_t>(10 * y + x));
  const Tensor img = rgb_of(2, 3, v);
  auto first_channel = [](const Tensor& t) {
    std::vector<int> out;
    for (int64_t i = 0; i < t.numel(); i += 3) out.push_back(t.data_as<uint8_t>()[i]);
    return out;
  };
  const std::vector<std::vector<int>> want = {
      {0, 1, 2, 10, 11, 12},   // 1 unchanged
      {2, 1, 0, 12, 11, 10},   // 2 mirror left-right
      {12, 11, 10, 2, 1, 0},   // 3 rotate 180
      {10, 11, 12, 0, 1, 2},   // 4 mirror top-bottom
      {0, 10, 1, 11, 2, 12},   // 5 transpose (3 rows x 2)
      {10, 0, 11, 1, 12, 2},   // 6 rotate 90 clockwise
      {12, 2, 11, 1, 10, 0},   // 7 transverse
      {2, 12, 1, 11, 0, 10}};  // 8 rotate 90 counter-clockwise
  for (int o = 1; o <= 8; ++o) {
    const Tensor t = apply_exif_orientation(img, o);
    EXPECT_EQ(first_channel(t), want[o - 1]) << "orientation " << o;
    EXPECT_EQ(t.size(0), o >= 5 ? 3 : 2) << "orientation " << o;
  }
}

TEST(ImageJpeg, DecodesAndAppliesExif) {
  const std::string dir = temp_dir("image_jpeg");
  std::vector<uint8_t> px;
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 24; ++x) {
      px.push_back(static_cast<uint8_t>(8 * x));
      px.push_back(static_cast<uint8_t>(12 * y));
      px.push_back(128);
    }
  const Tensor plain = load_image_rgb(write_jpeg(dir + "/plain.jpg", 24, 16, 3, px));
  ASSERT_EQ(plain.shape(), (Shape{16, 24, 3}));
  int max_err = 0;
  for (size_t i = 0; i < px.size(); ++i) max_err = std::max(max_err, std::abs(plain.data_as<uint8_t>()[i] - px[i]));
  EXPECT_LE(max_err, 8);  // quality 100 with 4:2:0 chroma
  for (bool big : {false, true}) {
    const Tensor rot =
        load_image_rgb(write_jpeg(dir + "/rot.jpg", 24, 16, 3, px, exif_block(6, big, /*jpeg_prefix=*/true)));
    EXPECT_EQ(bytes_of(rot), bytes_of(apply_exif_orientation(plain, 6)));
    EXPECT_EQ(rot.shape(), (Shape{24, 16, 3}));
  }
  std::vector<uint8_t> gray(8 * 8, 90);
  const Tensor g = load_image_rgb(write_jpeg(dir + "/gray.jpg", 8, 8, 1, gray));
  EXPECT_EQ(bytes_of(g), std::vector<uint8_t>(8 * 8 * 3, 90));
}

TEST(ImagePng, ExifChunkRotates) {
  const std::string dir = temp_dir("image_png_exif");
  PngSpec s{3, 2, PNG_COLOR_TYPE_RGB, 8, {}};
  for (int i = 0; i < 18; ++i) s.bytes.push_back(static_cast<uint8_t>(i));
  const Tensor plain = load_image_rgb(write_png(dir + "/a.png", s));
  s.exif = exif_block(8, false, false);
  const Tensor rot = load_image_rgb(write_png(dir + "/b.png", s));
  EXPECT_EQ(bytes_of(rot), bytes_of(apply_exif_orientation(plain, 8)));
  EXPECT_EQ(rot.shape(), (Shape{3, 2, 3}));
}

// A PNG made of chunks by hand (signature, IHDR with any size, a few IDAT
// bytes, IEND), so a header can claim what a file does not hold.
uint32_t crc32_of(const std::string& bytes) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}
std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}
std::string chunk(const std::string& type, const std::string& data) {
  std::string body = type;
  body += data;
  std::string out = be32(static_cast<uint32_t>(data.size()));
  out += body;
  out += be32(crc32_of(body));
  return out;
}
std::string png_claiming(uint32_t w, uint32_t h) {
  std::string ihdr = be32(w);
  ihdr += be32(h);
  ihdr += std::string{8, 2, 0, 0, 0};  // 8-bit RGB, deflate, no filter/interlace
  std::string out = "\x89PNG\r\n\x1a\n";
  out += chunk("IHDR", ihdr);
  out += chunk("IDAT", std::string("\x78\x9c\x63\x00\x00\x00\x01\x00\x01", 9));
  out += chunk("IEND", "");
  return out;
}

TEST(ImageErrors, SizeLimitsComeFromTheHeader) {
  const std::string dir = temp_dir("image_limits");
  auto refused = [&](const std::string& name, const std::string& bytes, std::initializer_list<std::string> words) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return throws_with([&] { load_image_rgb(dir + "/" + name); }, words);
  };
  // 20000 x 10000 = 200 Mpx: over PIL's decompression-bomb limit.
  EXPECT_TRUE(refused("bomb.png", png_claiming(20000, 10000), {"bomb.png", "20000x10000", "178956970"}));
  // 8000 x 8000 is within the limit, but 192 MB of pixels cannot come out of ~80 bytes.
  EXPECT_TRUE(refused("liar.png", png_claiming(8000, 8000), {"liar.png", "more than its"}));
  EXPECT_TRUE(refused("side.png", png_claiming(70000, 10), {"side.png"}));
  // 1300 x 10 is a 130:1 strip.
  PngSpec strip{1300, 10, PNG_COLOR_TYPE_RGB, 8, std::vector<uint8_t>(1300 * 10 * 3, 9)};
  write_png(dir + "/strip.png", strip);
  EXPECT_TRUE(throws_with([&] { load_image_rgb(dir + "/strip.png"); }, {"strip.png", "1300x10", "64:1"}));
  EXPECT_EQ(image_size_problem(4096, 4096), nullptr);
  EXPECT_NE(image_size_problem(0, 5), nullptr);
  EXPECT_TRUE(throws_with([&] { load_image_rgb("/dev/zero"); }, {"/dev/zero", "character device"}));
  EXPECT_TRUE(throws_with([&] { load_image_rgb(dir); }, {dir, "is a folder"}));
}

TEST(ImageErrors, OneLineNamingTheFile) {
  const std::string dir = temp_dir("image_errors");
  EXPECT_TRUE(throws_with([&] { load_image_rgb(dir + "/absent.png"); }, {"absent.png", "cannot open"}));
  {
    std::ofstream(dir + "/text.png") << "hello, not an image";
  }
  EXPECT_TRUE(throws_with([&] { load_image_rgb(dir + "/text.png"); }, {"text.png", "unsupported image format"}));
  PngSpec s{4, 4, PNG_COLOR_TYPE_RGB, 8, std::vector<uint8_t>(48, 7)};
  write_png(dir + "/ok.png", s);
  std::ifstream in(dir + "/ok.png", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir + "/cut.png", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_TRUE(throws_with([&] { load_image_rgb(dir + "/cut.png"); }, {"cut.png", "cannot decode PNG"}));
  std::vector<uint8_t> px(32 * 32 * 3, 100);
  write_jpeg(dir + "/ok.jpg", 32, 32, 3, px);
  std::ifstream jin(dir + "/ok.jpg", std::ios::binary);
  std::string jb((std::istreambuf_iterator<char>(jin)), std::istreambuf_iterator<char>());
  std::ofstream(dir + "/cut.jpg", std::ios::binary) << jb.substr(0, jb.size() / 2);
  EXPECT_TRUE(throws_with([&] { load_image_rgb(dir + "/cut.jpg"); }, {"cut.jpg", "cannot decode JPEG"}));
}

TEST(ImageErrors, EntropyDataCutBeforeTheEndMarkerIsTruncation) {
  // The scan data cut short but the file still ends in EOI: libjpeg would
  // fill the missing blocks with gray (a 1 kB file could become 170 Mpx), PIL
  // calls it truncated, and so do we.
  const std::string dir = temp_dir("image_cut_scan");
  std::vector<uint8_t> px(64 * 64 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 37 + i / 191);
  std::ifstream in(write_jpeg(dir + "/ok.jpg", 64, 64, 3, px), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t sos = bytes.rfind("\xff\xda");
  ASSERT_NE(sos, std::string::npos);
  const std::string cut = bytes.substr(0, sos + (bytes.size() - sos) / 3) + "\xff\xd9";
  std::ofstream(dir + "/cut.jpg", std::ios::binary) << cut;
  EXPECT_TRUE(throws_with([&] { load_image_rgb(dir + "/cut.jpg"); }, {"cut.jpg", "cannot decode JPEG"}));
}

TEST(ImageProbe, SizeFromTheHeaderAfterOrientation) {
  const std::string dir = temp_dir("image_probe");
  PngSpec s{40, 8, PNG_COLOR_TYPE_RGB, 8, std::vector<uint8_t>(40 * 8 * 3, 5)};
  write_png(dir + "/wide.png", s);
  EXPECT_EQ(probe_image_size(dir + "/wide.png").width, 40);
  EXPECT_EQ(probe_image_size(dir + "/wide.png").height, 8);
  std::vector<uint8_t> px(24 * 16 * 3, 50);
  // EXIF 6 (rotate 90): the decoded image is 16 x 24, and so is the probe.
  const std::string rot = write_jpeg(dir + "/rot.jpg", 24, 16, 3, px, exif_block(6, true, /*jpeg_prefix=*/true));
  const ImageSize r = probe_image_size(rot);
  const Tensor t = load_image_rgb(rot);
  EXPECT_EQ(r.width, t.size(1));
  EXPECT_EQ(r.height, t.size(0));
  EXPECT_EQ(r.width, 16);
  std::ofstream(dir + "/bomb.png", std::ios::binary) << png_claiming(20000, 10000);
  EXPECT_TRUE(throws_with([&] { probe_image_size(dir + "/bomb.png"); }, {"bomb.png", "178956970"}));
  EXPECT_TRUE(throws_with([&] { probe_image_size("/dev/zero"); }, {"/dev/zero", "character device"}));
}

TEST(ImageProbe, ReferenceSizeProblemNeedsOnlyTheSize) {
  EXPECT_EQ(reference_size_problem(1024, 768, 448, 256), "");
  // 640x16 at 96x64: a 96x2 canvas, under the encoder's 32-pixel grid.
  const std::string why = reference_size_problem(640, 16, 96, 64);
  EXPECT_NE(why.find("640x16"), std::string::npos) << why;
  EXPECT_NE(why.find("96x2"), std::string::npos) << why;
  EXPECT_NE(reference_size_problem(16, 600, 448, 256), "");
}

TEST(ImageResize, TrivialCases) {
  std::vector<uint8_t> v;
  for (int i = 0; i < 5 * 7; ++i) v.insert(v.end(), {17, 200, 99});
  const Tensor flat = rgb_of(5, 7, v);
  const Tensor same = resize_lanczos_pil(flat, 7, 5);
  EXPECT_EQ(bytes_of(same), v);
  for (auto [w, h] : {std::pair{3, 2}, {13, 9}, {7, 11}}) {  // a flat image stays flat (taps sum to 1)
    const Tensor r = resize_lanczos_pil(flat, w, h);
    ASSERT_EQ(r.shape(), (Shape{h, w, 3}));
    for (int64_t i = 0; i < r.numel(); i += 3) {
      EXPECT_EQ(r.data_as<uint8_t>()[i], 17);
      EXPECT_EQ(r.data_as<uint8_t>()[i + 1], 200);
      EXPECT_EQ(r.data_as<uint8_t>()[i + 2], 99);
    }
  }
  EXPECT_TRUE(throws_with([&] { resize_lanczos_pil(flat, 0, 3); }, {"resize_lanczos_pil", "target size"}));
}

}  // namespace
}  // namespace magi2::test
