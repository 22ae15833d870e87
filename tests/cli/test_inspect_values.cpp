// `magi2 inspect MODEL --check-values`: every weight of the built-in tiny
// model is finite; a NaN written into one tensor is reported by file and
// tensor name, with a one-line error and a non-zero exit.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "util/cli.h"

namespace magi2 {
namespace {

namespace fs = std::filesystem;
using test::magi2;

TEST(InspectCheckValues, FindsANanInTheWeights) {
  const fs::path dir = fs::path(test::temp_dir("inspect_values")) / "m";
  ASSERT_EQ(magi2("make-tiny " + dir.string()).rc, 0);
  const test::CliRun ok = magi2("inspect " + dir.string() + " --check-values");
  ASSERT_EQ(ok.rc, 0) << ok.out;
  EXPECT_NE(ok.out.find("check-values: OK"), std::string::npos) << ok.out;

  // Poison the first element of the DiT shard's first floating-point tensor.
  fs::path shard;
  for (const auto& e : fs::directory_iterator(dir / "preview"))
    if (e.path().extension() == ".safetensors") shard = e.path();
  ASSERT_FALSE(shard.empty());
  std::string name;
  size_t at = 0;
  {
    const auto f = SafetensorsFile::open(shard.string());
    for (const auto& e : f->entries())
      if ((e.dtype == DType::BF16 || e.dtype == DType::F32) && e.end > e.begin) {
        name = e.name;
        std::string bytes = read_text_file(shard.string());
        uint64_t header = 0;
        for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[i]);
        at = 8 + header + e.begin;
        // NaN in either dtype: all-ones exponent and a mantissa bit (bf16 = the top two bytes of f32).
        const size_t hi = at + (e.dtype == DType::F32 ? 2 : 0);
        bytes[hi] = static_cast<char>(0xc0);
        bytes[hi + 1] = static_cast<char>(0x7f);
        write_file_atomic(shard.string() + ".new", bytes);
        break;
      }
  }
  ASSERT_FALSE(name.empty());
  fs::rename(shard.string() + ".new", shard);
  const test::CliRun bad = magi2("inspect " + dir.string() + " --check-values");
  test::expect_one_line_error(bad, "tensor '" + name + "'");
  EXPECT_NE(bad.out.find(shard.filename().string()), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("1 NaN"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace magi2
