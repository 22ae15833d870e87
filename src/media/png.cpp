#include "media/png.h"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "io/mmap_file.h"

namespace magi2 {
namespace {

// libpng reports errors through a callback that must not return. Exceptions
// must not unwind through libpng's C frames, so the callback records the
// message and longjmps back into run_png(), whose frame holds no C++ objects.
struct PngError {
  char msg[256] = {0};
};
[[noreturn]] void png_record_error(png_structp png, png_const_charp msg) {
  auto* err = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(err->msg, sizeof err->msg, "%s", msg);
  png_longjmp(png, 1);
}
void png_warn(png_structp, png_const_charp) {}

// Calls fn(png, info, arg) under libpng's setjmp; false when libpng reported an error.
// fn must not create objects with destructors (a longjmp skips them).
bool run_png(png_structp png, png_infop info, void (*fn)(png_structp, png_infop, void*), void* arg) {
  if (setjmp(png_jmpbuf(png))) return false;
  fn(png, info, arg);
  return true;
}

void append_bytes(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}
void no_flush(png_structp) {}

struct MemReader {
  const unsigned char* data;
  size_t size;
  size_t pos;
};
void read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<MemReader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "file is truncated");
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

}  // namespace

std::string frame_png_name(int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "frame_%05lld.png", static_cast<long long>(index));
  return buf;
}

std::string encode_png_rgb(const Tensor& frame) {
  MAGI2_CHECK(frame.defined() && frame.device() == Device::CPU && frame.dtype() == DType::U8 &&
                  frame.dim() == 3 && frame.size(2) == 3 && frame.is_contiguous() &&
                  frame.size(0) >= 1 && frame.size(1) >= 1,
              "png: frame must be a contiguous CPU U8 [H, W, 3] tensor, got ",
              dtype_name(frame.dtype()), " ", shape_str(frame.shape()));
  const auto h = static_cast<png_uint_32>(frame.size(0));
  const auto w = static_cast<png_uint_32>(frame.size(1));
  PngError err;
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, png_record_error, png_warn);
  MAGI2_CHECK(png, "png: out of memory");
  png_infop info = png_create_info_struct(png);
  struct Guard {
    png_structp* p;
    png_infop* i;
    ~Guard() { png_destroy_write_struct(p, i); }
  } guard{&png, &info};
  MAGI2_CHECK(info, "png: out of memory");
  png_set_write_fn(png, &out, append_bytes, no_flush);
  struct Job {
    png_uint_32 w, h;
    const uint8_t* base;
  } job{w, h, frame.data_as<uint8_t>()};
  auto write = [](png_structp p, png_infop i, void* arg) {
    const auto* j = static_cast<const Job*>(arg);
    png_set_IHDR(p, i, j->w, j->h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(p, 6);
    png_write_info(p, i);
    for (png_uint_32 y = 0; y < j->h; ++y)
      png_write_row(p, const_cast<png_bytep>(j->base + static_cast<size_t>(y) * j->w * 3));
    png_write_end(p, nullptr);
  };
  MAGI2_CHECK(run_png(png, info, write, &job), "png encode: ", err.msg);
  return out;
}

void save_frames_png(const std::string& dir, const Tensor& frames) {
  MAGI2_CHECK(frames.defined() && frames.dtype() == DType::U8 && frames.dim() == 4 &&
                  frames.size(3) == 3 && frames.is_contiguous(),
              "--save-frames '", dir, "': frames must be a contiguous U8 [T, H, W, 3] tensor, got ",
              dtype_name(frames.dtype()), " ", shape_str(frames.shape()));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MAGI2_CHECK(!ec && std::filesystem::is_directory(dir), "--save-frames '", dir,
              "': cannot create directory: ", ec ? ec.message() : "not a directory");
  const int64_t t = frames.size(0);
  // Exceptions cannot leave an OpenMP region: keep the first message per frame.
  std::vector<std::string> errors(static_cast<size_t>(t));
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < t; ++i) {
    try {
      const std::string path = (std::filesystem::path(dir) / frame_png_name(i)).string();
      write_file_atomic(path, encode_png_rgb(frames.slice_rows(i, i + 1).reshape(
                                  {frames.size(1), frames.size(2), 3})));
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(i)] = e.what();
    }
  }
  for (const auto& e : errors) MAGI2_CHECK(e.empty(), e);
}

Tensor read_png_rgb(const std::string& path) {
  auto file = MappedFile::open(path);
  MAGI2_CHECK(file->size() >= 8 && png_sig_cmp(file->data(), 0, 8) == 0, "'", path,
              "' is not a PNG file");
  PngError err;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, png_record_error, png_warn);
  MAGI2_CHECK(png, "png: out of memory");
  png_infop info = png_create_info_struct(png);
  struct Guard {
    png_structp* p;
    png_infop* i;
    ~Guard() { png_destroy_read_struct(p, i, nullptr); }
  } guard{&png, &info};
  MAGI2_CHECK(info, "png: out of memory");
  MemReader reader{file->data(), file->size(), 0};
  png_set_read_fn(png, &reader, read_bytes);
  auto header = [](png_structp p, png_infop i, void*) {
    png_read_info(p, i);
    // Normalise every PNG flavour to 8-bit RGB.
    png_set_expand(p);
    png_set_scale_16(p);
    png_set_strip_alpha(p);
    png_set_gray_to_rgb(p);
    png_read_update_info(p, i);
  };
  MAGI2_CHECK(run_png(png, info, header, nullptr), "png '", path, "': ", err.msg);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  MAGI2_CHECK(w >= 1 && h >= 1 && png_get_rowbytes(png, info) == static_cast<size_t>(w) * 3, "png '",
              path, "': unexpected row size after conversion to RGB");
  Tensor out = Tensor::empty({static_cast<int64_t>(h), static_cast<int64_t>(w), 3}, DType::U8);
  std::vector<png_bytep> rows(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = out.data_as<uint8_t>() + static_cast<size_t>(y) * w * 3;
  auto body = [](png_structp p, png_infop, void* arg) {
    png_read_image(p, static_cast<png_bytepp>(arg));
    png_read_end(p, nullptr);
  };
  MAGI2_CHECK(run_png(png, info, body, rows.data()), "png '", path, "': ", err.msg);
  return out;
}

}  // namespace magi2
