#include "util/testing.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <system_error>
#include <vector>

namespace magi2::test {

std::string golden_dir() {
  if (const char* e = std::getenv("MAGI2_GOLDEN_DIR")) return e;
  return MAGI2_DEFAULT_GOLDEN_DIR;
}

std::string fixture_dir() {
  if (const char* e = std::getenv("MAGI2_FIXTURE_DIR")) return e;
  return MAGI2_FIXTURE_DIR;
}

std::string magi2_binary() { return MAGI2_BINARY_PATH; }

namespace {

// Folders made by temp_dir(), removed when the test process exits.
std::vector<std::string>& temp_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

void remove_temp_dirs() {
  std::error_code ec;
  for (const auto& d : temp_dirs()) std::filesystem::remove_all(d, ec);
}

}  // namespace

std::string temp_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / ("magi2_test_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  if (temp_dirs().empty()) std::atexit(remove_temp_dirs);
  temp_dirs().push_back(p.string());
  return p.string();
}

int64_t differing_elements(const Tensor& a, const Tensor& b) {
  MAGI2_CHECK(a.numel() == b.numel() && a.dtype() == b.dtype(), "differing_elements: ", shape_str(a.shape()), " vs ",
              shape_str(b.shape()));
  const size_t e = dtype_size(a.dtype());
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    n += std::memcmp(static_cast<const char*>(a.data()) + i * e, static_cast<const char*>(b.data()) + i * e, e) != 0;
  return n;
}

Tensor audio_channels_last(const Tensor& t) {
  const int64_t c = t.size(1), l = t.size(2);
  Tensor src = t.to(DType::F32), out = Tensor::empty({l, c}, DType::F32);
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < l; ++j) out.data_as<float>()[j * c + i] = src.data_as<float>()[i * l + j];
  return out;
}

Diff compare(const Tensor& a, const Tensor& b) {
  MAGI2_CHECK(a.numel() == b.numel(), "compare: numel ", a.numel(), " vs ", b.numel());
  MAGI2_CHECK(a.is_contiguous() && b.is_contiguous(), "compare: needs contiguous tensors");
  const Tensor& ac = a;
  double num = 0, den = 0, mx = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = ac.get_f32(i), y = b.get_f32(i);
    num += (x - y) * (x - y);
    den += y * y;
    mx = std::max(mx, std::fabs(x - y));
  }
  Diff d;
  d.rel_rms = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  d.max_abs = mx;
  d.ref_rms = std::sqrt(den / std::max<int64_t>(1, a.numel()));
  return d;
}

int run_command(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* f = ::popen(full.c_str(), "r");
  if (!f) return -1;
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  int st = ::pclose(f);
  if (output) *output = out;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace magi2::test
