// PNG/JPEG decoding to RGB with PIL's conventions (see image.h). The decoders
// report errors through setjmp/longjmp (their C interfaces); every jump lands
// in a frame that owns nothing but trivially destructible state, and the
// message is turned into one Error after the decoder has been released.
#include "io/image.h"

#include <png.h>
#include <setjmp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <jerror.h>

#include "io/mmap_file.h"

namespace magi2 {
namespace {

// zlib cannot inflate more than ~1032 bytes from one compressed byte; a PNG
// header promising more pixel data than that from the whole file is a bomb.
constexpr int64_t kMaxDeflateRatio = 1032;

void check_dims(int64_t w, int64_t h, const std::string& what) {
  const char* why = image_size_problem(w, h);
  MAGI2_CHECK(!why, what, ": image size ", w, "x", h, " ", why);
}

// ---------------------------------------------------------------- EXIF ----

uint32_t read_u16(const uint8_t* p, bool big) {
  return big ? (uint32_t{p[0]} << 8 | p[1]) : (uint32_t{p[1]} << 8 | p[0]);
}
uint32_t read_u32(const uint8_t* p, bool big) {
  return big ? (uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3])
             : (uint32_t{p[3]} << 24 | uint32_t{p[2]} << 16 | uint32_t{p[1]} << 8 | p[0]);
}

// EXIF payloads may carry the JPEG APP1 prefix (some PNG writers keep it; PIL strips it too).
int orientation_of_payload(const uint8_t* data, size_t size) {
  static const uint8_t kPrefix[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (size >= 6 && std::memcmp(data, kPrefix, 6) == 0) {
    data += 6;
    size -= 6;
  }
  return exif_orientation(data, size);
}

// ----------------------------------------------------------------- PNG ----

struct PngContext {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  std::vector<png_bytep> rows;  // owned here so that no frame across setjmp owns memory
  char message[256] = {0};
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->message, sizeof(ctx->message), "%s", msg ? msg : "libpng error");
  png_longjmp(png, 1);
}
void png_on_warning(png_structp, png_const_charp) {}

void png_read_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (n > ctx->size - ctx->pos) png_error(png, "file is truncated");
  std::memcpy(out, ctx->data + ctx->pos, n);
  ctx->pos += n;
}

// Decoded samples before the RGB mapping: `channels` 8-bit samples per pixel,
// or (gray16) one big-endian 16-bit sample per pixel.
struct RawPixels {
  int64_t width = 0, height = 0;
  int channels = 0;
  bool gray16 = false;
  std::vector<uint8_t> bytes;
  int orientation = 1;
};

// Returns false (with ctx.message set) on a libpng error. Only trivially
// destructible locals live in this frame across the setjmp.
bool png_decode(PngContext& ctx, RawPixels& out, bool header_only) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, png_on_error, png_on_warning);
  if (!png) {
    std::snprintf(ctx.message, sizeof(ctx.message), "cannot create a PNG reader");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(ctx.message, sizeof(ctx.message), "cannot create a PNG reader");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, &ctx, png_read_memory);
  png_set_user_limits(png, kMaxImageSide, kMaxImageSide);
  png_set_chunk_malloc_max(png, 8u << 20);  // text/ICC/EXIF chunks: far beyond real ones
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (const char* why = image_size_problem(w, h)) {
    std::snprintf(ctx.message, sizeof(ctx.message), "image size %ux%u %s", w, h, why);
    png_longjmp(png, 1);
  }
  const int64_t raw_bytes = (static_cast<int64_t>(png_get_rowbytes(png, info)) + 1) * h;
  if (raw_bytes > kMaxDeflateRatio * static_cast<int64_t>(ctx.size) + 65536) {
    std::snprintf(ctx.message, sizeof(ctx.message),
                  "header claims %ux%u pixels (%lld bytes), more than its %zu bytes can hold", w, h,
                  static_cast<long long>(raw_bytes), ctx.size);
    png_longjmp(png, 1);
  }
  if (header_only) {  // the size, and an eXIf chunk placed before the image data
    out.width = w;
    out.height = h;
    png_uint_32 exif_len = 0;
    png_bytep exif = nullptr;
    if (png_get_eXIf_1(png, info, &exif_len, &exif) != 0 && exif)
      out.orientation = orientation_of_payload(exif, exif_len);
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }
  // PIL opens 16-bit grayscale as I;16, whose RGB conversion clips the value
  // at 255; every other 16-bit layout keeps only the high byte.
  const bool gray16 = color == PNG_COLOR_TYPE_GRAY && depth == 16;
  if (depth == 16 && !gray16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t rowbytes = png_get_rowbytes(png, info);
  out.width = w;
  out.height = h;
  out.gray16 = gray16;
  out.channels = png_get_channels(png, info);
  out.bytes.resize(rowbytes * h);
  ctx.rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) ctx.rows[y] = out.bytes.data() + y * rowbytes;
  png_read_image(png, ctx.rows.data());
  png_read_end(png, info);  // an eXIf chunk may follow the image data
  png_uint_32 exif_len = 0;
  png_bytep exif = nullptr;
  if (png_get_eXIf_1(png, info, &exif_len, &exif) != 0 && exif)
    out.orientation = orientation_of_payload(exif, exif_len);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

// ---------------------------------------------------------------- JPEG ----

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Warnings are silent, except a premature end of data: PIL refuses truncated
// JPEGs ("image file is truncated"), so we do as well. That includes entropy-
// coded data cut short by the next marker (JWRN_HIT_MARKER): libjpeg would
// fill the rest with gray blocks, so a 1 kB file could decode to 170 Mpx.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && (cinfo->err->msg_code == JWRN_JPEG_EOF || cinfo->err->msg_code == JWRN_HIT_MARKER))
    jpeg_on_error(cinfo);
}

// Aborts a progressive decode past kMaxJpegScans scans (through the error
// handler, so the usual longjmp cleanup runs).
void jpeg_on_progress(j_common_ptr common) {
  auto* cinfo = reinterpret_cast<j_decompress_ptr>(common);
  if (cinfo->input_scan_number > kMaxJpegScans) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message), "more than %d progressive scans", kMaxJpegScans);
    longjmp(err->jump, 1);
  }
}

bool jpeg_decode(const uint8_t* data, size_t size, RawPixels& out, JpegError& err, bool header_only) {
  jpeg_decompress_struct cinfo;
  jpeg_progress_mgr progress{};
  progress.progress_monitor = jpeg_on_progress;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  err.mgr.emit_message = jpeg_on_message;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  // libjpeg's own buffers (a progressive image keeps every coefficient) are
  // capped too: past this it stops with "Insufficient memory" / no backing store.
  cinfo.mem->max_memory_to_use = 1024L << 20;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);
  if (const char* why = image_size_problem(cinfo.image_width, cinfo.image_height)) {
    std::snprintf(err.message, sizeof(err.message), "image size %ux%u %s", cinfo.image_width,
                  cinfo.image_height, why);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  if (jpeg_has_multiple_scans(&cinfo)) {
    cinfo.progress = &progress;
  }
  switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: cinfo.out_color_space = JCS_GRAYSCALE; break;
    case JCS_CMYK:
    case JCS_YCCK: cinfo.out_color_space = JCS_CMYK; break;
    default: cinfo.out_color_space = JCS_RGB; break;
  }
  // PIL uses the first APP1 segment that carries EXIF.
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      out.orientation = exif_orientation(m->data + 6, m->data_length - 6);
      break;
    }
  }
  if (header_only) {
    out.width = cinfo.image_width;
    out.height = cinfo.image_height;
    jpeg_destroy_decompress(&cinfo);
    return true;
  }
  jpeg_start_decompress(&cinfo);
  const int64_t w = cinfo.output_width, h = cinfo.output_height;
  if (image_size_problem(w, h)) {
    std::snprintf(err.message, sizeof(err.message), "decoded image size %lldx%lld is refused",
                  static_cast<long long>(w), static_cast<long long>(h));
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  out.width = w;
  out.height = h;
  out.channels = cinfo.output_components;
  const size_t stride = static_cast<size_t>(w) * out.channels;
  out.bytes.resize(stride * h);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.bytes.data() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

// PIL's MULDIV255: a*b/255 rounded, in integers.
inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}
inline uint8_t clip8(int v) { return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v)); }

// Maps decoded samples to RGB as PIL's convert("RGB") does for each mode.
Tensor to_rgb(const RawPixels& px, bool jpeg_cmyk) {
  Tensor out = Tensor::empty({px.height, px.width, 3}, DType::U8);
  uint8_t* o = out.data_as<uint8_t>();
  const int64_t n = px.width * px.height;
  const uint8_t* s = px.bytes.data();
  for (int64_t i = 0; i < n; ++i, o += 3) {
    if (px.gray16) {
      const uint8_t v = s[2 * i] != 0 ? 255 : s[2 * i + 1];
      o[0] = o[1] = o[2] = v;
    } else if (jpeg_cmyk) {
      // Adobe CMYK JPEGs store inverted samples (PIL rawmode CMYK;I).
      const uint8_t* p = s + 4 * i;
      const int nk = p[3];  // 255 - (255 - k)
      for (int c = 0; c < 3; ++c) o[c] = clip8(nk - muldiv255(255 - p[c], nk));
    } else if (px.channels <= 2) {
      o[0] = o[1] = o[2] = s[px.channels * i];
    } else {
      const uint8_t* p = s + px.channels * i;
      o[0] = p[0];
      o[1] = p[1];
      o[2] = p[2];
    }
  }
  return out;
}

}  // namespace

int exif_orientation(const uint8_t* tiff, size_t size) {
  if (size < 8) return 1;
  bool big;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    big = false;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    big = true;
  } else {
    return 1;
  }
  if (read_u16(tiff + 2, big) != 42) return 1;
  const uint32_t ifd = read_u32(tiff + 4, big);
  if (ifd > size || size - ifd < 2) return 1;
  const uint32_t count = read_u16(tiff + ifd, big);
  for (uint32_t i = 0; i < count; ++i) {
    const size_t e = size_t{ifd} + 2 + size_t{i} * 12;
    if (e + 12 > size) return 1;
    if (read_u16(tiff + e, big) != 0x0112) continue;
    const uint32_t type = read_u16(tiff + e + 2, big);
    if (type == 3) return static_cast<int>(read_u16(tiff + e + 8, big));   // SHORT
    if (type == 4) return static_cast<int>(read_u32(tiff + e + 8, big));   // LONG
    return 1;
  }
  return 1;
}

Tensor apply_exif_orientation(const Tensor& rgb, int orientation) {
  MAGI2_CHECK(rgb.dtype() == DType::U8 && rgb.dim() == 3 && rgb.shape()[2] == 3 && rgb.is_contiguous(),
              "apply_exif_orientation: expected a contiguous U8 [H, W, 3] image, got ", shape_str(rgb.shape()));
  if (orientation < 2 || orientation > 8) return rgb;
  const int64_t h = rgb.shape()[0], w = rgb.shape()[1];
  const bool swap = orientation >= 5;
  const int64_t oh = swap ? w : h, ow = swap ? h : w;
  Tensor out = Tensor::empty({oh, ow, 3}, DType::U8);
  const uint8_t* s = rgb.data_as<uint8_t>();
  uint8_t* d = out.data_as<uint8_t>();
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t x = 0; x < ow; ++x) {
      int64_t sx = x, sy = y;  // source column / row of output pixel (x, y)
      switch (orientation) {
        case 2: sx = w - 1 - x; break;                      // mirror left-right
        case 3: sx = w - 1 - x; sy = h - 1 - y; break;      // rotate 180
        case 4: sy = h - 1 - y; break;                      // mirror top-bottom
        case 5: sx = y; sy = x; break;                      // transpose
        case 6: sx = y; sy = h - 1 - x; break;              // rotate 90 clockwise
        case 7: sx = w - 1 - y; sy = h - 1 - x; break;      // transverse
        case 8: sx = w - 1 - y; sy = x; break;              // rotate 90 counter-clockwise
      }
      std::memcpy(d + (y * ow + x) * 3, s + (sy * w + sx) * 3, 3);
    }
  }
  return out;
}

const char* image_size_problem(int64_t w, int64_t h) {
  if (w < 1 || h < 1) return "is empty";
  if (w > kMaxImageSide || h > kMaxImageSide) return "has a side over 65500 pixels";
  if (w * h > kMaxImagePixels) return "exceeds 178956970 pixels (PIL's decompression-bomb limit)";
  if (std::max(w, h) > kMaxImageAspect * std::min(w, h)) return "is more elongated than 64:1";
  return nullptr;
}

namespace {

// One of the two decoders by signature; `header_only`: size and orientation only.
RawPixels decode_raw(const uint8_t* data, size_t size, const std::string& what, bool header_only, bool& cmyk) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  RawPixels px;
  cmyk = false;
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) {
    PngContext ctx;
    ctx.data = data;
    ctx.size = size;
    MAGI2_CHECK(png_decode(ctx, px, header_only), what, ": cannot decode PNG: ", ctx.message);
  } else if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
    JpegError err;
    err.message[0] = 0;
    MAGI2_CHECK(jpeg_decode(data, size, px, err, header_only), what, ": cannot decode JPEG: ", err.message);
    cmyk = px.channels == 4;
  } else {
    MAGI2_CHECK(false, what, ": unsupported image format (expected a PNG or JPEG file)");
  }
  check_dims(px.width, px.height, what);
  return px;
}

}  // namespace

ImageSize probe_image_size(const std::string& path) {
  const std::string bytes = read_text_file(path, kMaxImageFileBytes);
  MAGI2_CHECK(!bytes.empty(), path, ": image file is empty");
  bool cmyk = false;
  const RawPixels px = decode_raw(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, true, cmyk);
  const bool swap = px.orientation >= 5 && px.orientation <= 8;  // transposing orientations
  return swap ? ImageSize{px.height, px.width} : ImageSize{px.width, px.height};
}

Tensor decode_image_rgb(const uint8_t* data, size_t size, const std::string& what) {
  bool cmyk = false;
  const RawPixels px = decode_raw(data, size, what, false, cmyk);
  MAGI2_CHECK(px.gray16 || (px.channels >= 1 && px.channels <= 4), what, ": unsupported pixel layout with ",
              px.channels, " channels");
  return apply_exif_orientation(to_rgb(px, cmyk), px.orientation);
}

Tensor load_image_rgb(const std::string& path) {
  const std::string bytes = read_text_file(path, kMaxImageFileBytes);
  MAGI2_CHECK(!bytes.empty(), path, ": image file is empty");
  return decode_image_rgb(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

}  // namespace magi2
