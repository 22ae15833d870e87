// safetensors: round trip through write_safetensors, and one clear magi2::Error
// per kind of corrupt file. Corrupt files are written byte by byte here (not via
// write_safetensors) so each test controls exactly which rule is broken.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "util/testing.h"

namespace magi2 {
namespace {

namespace fs = std::filesystem;

using test::throws_with;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string le64(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return s;
}

// A file with the given header text and `data_bytes` zero bytes of data section.
std::string raw_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir("safetensors"); }
  // Writes `bytes` to <dir>/<name> and returns the path.
  std::string file(const std::string& name, const std::string& bytes) {
    const std::string p = dir_ + "/" + name;
    write_bytes(p, bytes);
    return p;
  }
  std::string dir_;
};

// Opens `path` and checks the error names the file and every word.
::testing::AssertionResult open_fails(const std::string& path, std::initializer_list<std::string> words) {
  auto r = throws_with([&] { SafetensorsFile::open(path); }, words);
  if (!r) return r;
  return throws_with([&] { SafetensorsFile::open(path); }, {path});
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// ---------------------------------------------------------------- round trip

TEST_F(SafetensorsTest, RoundTripAllDtypesShapesAndMetadata) {
  std::vector<std::pair<std::string, Tensor>> ts;
  ts.emplace_back("w.f32", Tensor::from_f32({2, 3}, {1, -2, 3.5f, 0, 1e-30f, 7}));
  ts.emplace_back("w.bf16", Tensor::from_f32({3, 1}, {1.5f, -0.25f, 3.14159f}).to(DType::BF16));
  ts.emplace_back("w.f16", Tensor::from_f32({2}, {65504, -1e-5f}).to(DType::F16));
  ts.emplace_back("w.f8", Tensor::from_f32({1, 3}, {448, 0.5f, -0.0f}).to(DType::F8E4M3));
  Tensor i32 = Tensor::empty({3}, DType::I32);
  for (int i = 0; i < 3; ++i) i32.data_as<int32_t>()[i] = -7 + i * 1000000;
  ts.emplace_back("idx.i32", i32);
  Tensor i64 = Tensor::empty({1}, DType::I64);
  i64.data_as<int64_t>()[0] = (int64_t{1} << 40) + 3;
  ts.emplace_back("idx.i64", i64);
  Tensor u8 = Tensor::empty({5}, DType::U8);  // odd size: later tensors start unaligned
  for (int i = 0; i < 5; ++i) u8.data_as<uint8_t>()[i] = static_cast<uint8_t>(250 + i);
  ts.emplace_back("raw.u8", u8);
  Tensor b = Tensor::zeros({2, 2}, DType::BOOL);
  b.data_as<uint8_t>()[3] = 1;
  ts.emplace_back("mask.bool", b);
  ts.emplace_back("empty", Tensor::zeros({0, 4}, DType::F32));
  ts.emplace_back("scalar", Tensor::from_f32({}, {42}));
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "a \"quoted\" value"}};

  const std::string path = dir_ + "/rt.safetensors";
  write_safetensors(path, ts, meta);
  // Atomic writer: only the final file remains, no temporary beside it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);

  Tensor kept;
  {
    auto f = SafetensorsFile::open(path);
    EXPECT_EQ(f->path(), path);
    EXPECT_EQ(f->metadata(), meta);
    EXPECT_EQ(f->entries().size(), ts.size());
    for (const auto& [name, t] : ts) {
      ASSERT_TRUE(f->contains(name)) << name;
      const SafetensorsEntry& e = f->entry(name);
      EXPECT_EQ(e.name, name);
      EXPECT_EQ(e.dtype, t.dtype()) << name;
      EXPECT_EQ(e.shape, t.shape()) << name;
      EXPECT_EQ(e.end - e.begin, t.nbytes()) << name;
      Tensor v = f->tensor(name);
      EXPECT_EQ(v.shape(), t.shape()) << name;
      EXPECT_EQ(v.dtype(), t.dtype()) << name;
      EXPECT_TRUE(v.is_contiguous());
      EXPECT_EQ(bytes_of(v), bytes_of(t)) << name;
    }
    EXPECT_FALSE(f->contains("nope"));
    EXPECT_TRUE(throws_with([&] { f->entry("nope"); }, {path, "nope"}));
    EXPECT_TRUE(throws_with([&] { f->tensor("nope"); }, {path, "nope"}));
    kept = f->tensor("w.f32");
  }
  // The view keeps the mapping alive after the file object is gone.
  EXPECT_EQ(kept.get_f32(2), 3.5f);
  EXPECT_EQ(kept.get_f32(4), 1e-30f);

  // The header is padded so the data section starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST_F(SafetensorsTest, OverwriteAndEmptyFile) {
  const std::string path = dir_ + "/o.safetensors";
  write_safetensors(path, {{"a", Tensor::from_f32({4}, {1, 2, 3, 4})}});
  write_safetensors(path, {{"b", Tensor::from_f32({1}, {9})}});  // replaces, never appends
  auto f = SafetensorsFile::open(path);
  EXPECT_FALSE(f->contains("a"));
  EXPECT_EQ(f->tensor("b").get_f32(0), 9.0f);
  // No tensors at all is still a valid file.
  const std::string none = dir_ + "/none.safetensors";
  write_safetensors(none, {});
  EXPECT_TRUE(SafetensorsFile::open(none)->entries().empty());
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  const std::string path = dir_ + "/w.safetensors";
  Tensor t = Tensor::from_f32({2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(throws_with([&] { write_safetensors(path, {{"x", t}, {"x", t}}); }, {"duplicate", "'x'"}));
  EXPECT_TRUE(throws_with([&] { write_safetensors(path, {{"col", t.slice_cols(0, 1)}}); },
                          {"'col'", "contiguous"}));
  EXPECT_FALSE(fs::exists(path));  // a failed write leaves nothing behind
}

// ---------------------------------------------------------------- truncation

TEST_F(SafetensorsTest, TruncatedShorterThanLengthPrefix) {
  EXPECT_TRUE(open_fails(file("short.safetensors", std::string("\x10\0\0", 3)), {"truncated", "3 bytes"}));
  EXPECT_TRUE(open_fails(file("zero.safetensors", ""), {"truncated", "0 bytes"}));
}

TEST_F(SafetensorsTest, TruncatedHeaderPastEnd) {
  const std::string hdr = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string bytes = le64(hdr.size() + 100) + hdr;
  EXPECT_TRUE(open_fails(file("hdr.safetensors", bytes), {"truncated", std::to_string(hdr.size() + 100)}));
}

TEST_F(SafetensorsTest, TruncatedTensorDataPastEnd) {
  // Header promises 16 bytes of 'w' but the file stops after 8.
  const std::string hdr = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  EXPECT_TRUE(open_fails(file("data.safetensors", raw_file(hdr, 8)),
                         {"'w'", "[0, 16]", "outside the file", "8 bytes"}));
}

TEST_F(SafetensorsTest, HeaderLengthOverLimit) {
  // Checked before the size of the file: a huge length must not be trusted or allocated.
  const std::string p = file("huge.safetensors", le64(kSafetensorsMaxHeader + 1) + "{}");
  EXPECT_TRUE(open_fails(p, {"header length", std::to_string(kSafetensorsMaxHeader + 1), "limit"}));
  EXPECT_TRUE(open_fails(file("huge2.safetensors", le64(~uint64_t{0})), {"header length", "limit"}));
}

// ---------------------------------------------------------------- header structure

TEST_F(SafetensorsTest, HeaderNotJson) {
  EXPECT_TRUE(open_fails(file("nj.safetensors", raw_file("{\"a\": [1, 2", 0)), {"not valid JSON"}));
  EXPECT_TRUE(open_fails(file("nj2.safetensors", raw_file("", 0)), {"not valid JSON"}));
  EXPECT_TRUE(open_fails(file("nj3.safetensors", raw_file(std::string("{}\x01\x02", 4), 0)), {"not valid JSON"}));
}

TEST_F(SafetensorsTest, DuplicateTensorNameIsRefused) {
  const std::string hdr = R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_TRUE(open_fails(file("dup.safetensors", raw_file(hdr, 8)), {"dup.safetensors", "'t'", "appears twice"}));
  // The same key inside different entries is fine (only tensor names must be unique).
  const std::string ok = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_NO_THROW(SafetensorsFile::open(file("nodup.safetensors", raw_file(ok, 8))));
}

TEST_F(SafetensorsTest, HeaderNotObject) {
  EXPECT_TRUE(open_fails(file("arr.safetensors", raw_file("[1, 2, 3]", 0)), {"not a JSON object"}));
  EXPECT_TRUE(open_fails(file("str.safetensors", raw_file("\"x\"", 0)), {"not a JSON object"}));
}

TEST_F(SafetensorsTest, EntryMissingFields) {
  EXPECT_TRUE(open_fails(file("mf.safetensors", raw_file(R"({"t":{"dtype":"F32","shape":[1]}})", 4)),
                         {"'t'", "data_offsets"}));
  EXPECT_TRUE(open_fails(file("mf2.safetensors", raw_file(R"({"t":[1,2]})", 4)), {"'t'", "dtype"}));
}

TEST_F(SafetensorsTest, UnknownDtype) {
  EXPECT_TRUE(open_fails(
      file("dt.safetensors", raw_file(R"({"t":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8)),
      {"'t'", "unknown dtype", "F64"}));
  EXPECT_TRUE(open_fails(
      file("dt2.safetensors", raw_file(R"({"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4)),
      {"'t'", "unknown dtype"}));
}

TEST_F(SafetensorsTest, BadDimension) {
  EXPECT_TRUE(open_fails(
      file("neg.safetensors", raw_file(R"({"t":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]}})", 0)),
      {"'t'", "bad dimension", "-1"}));
  EXPECT_TRUE(open_fails(
      file("frac.safetensors", raw_file(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8)),
      {"'t'", "bad dimension", "2.5"}));
  EXPECT_TRUE(open_fails(
      file("str.safetensors", raw_file(R"({"t":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", 8)),
      {"'t'", "bad dimension"}));
  EXPECT_TRUE(open_fails(
      file("nos.safetensors", raw_file(R"({"t":{"dtype":"F32","shape":3,"data_offsets":[0,12]}})", 12)),
      {"'t'", "shape is not an array"}));
  // 2^40 x 2^40 elements cannot be addressed: rejected instead of wrapping around.
  EXPECT_TRUE(open_fails(file("ovf.safetensors",
                              raw_file(R"({"t":{"dtype":"F32","shape":[1099511627776,1099511627776],)"
                                       R"("data_offsets":[0,0]}})",
                                       0)),
                         {"'t'", "overflows"}));
}

TEST_F(SafetensorsTest, ByteSizeMismatch) {
  EXPECT_TRUE(open_fails(
      file("bs.safetensors", raw_file(R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16)),
      {"'t'", "byte size 12", "F32", "[2, 2]", "16 bytes"}));
  EXPECT_TRUE(open_fails(
      file("bs2.safetensors", raw_file(R"({"t":{"dtype":"BF16","shape":[3],"data_offsets":[0,12]}})", 16)),
      {"'t'", "byte size 12", "BF16", "6 bytes"}));
}

TEST_F(SafetensorsTest, ReversedOffsets) {
  EXPECT_TRUE(open_fails(
      file("rev.safetensors", raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)),
      {"'t'", "[8, 0]", "reversed"}));
}

TEST_F(SafetensorsTest, OffsetsOutsideFile) {
  EXPECT_TRUE(open_fails(
      file("out.safetensors", raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[100,104]}})", 8)),
      {"'t'", "[100, 104]", "outside the file"}));
  EXPECT_TRUE(open_fails(
      file("negoff.safetensors", raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 8)),
      {"'t'", "data_offsets", "non-negative"}));
  EXPECT_TRUE(open_fails(
      file("oneoff.safetensors", raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 8)),
      {"'t'", "data_offsets"}));
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  const std::string hdr = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_TRUE(open_fails(file("ov.safetensors", raw_file(hdr, 16)), {"'a'", "'b'", "overlap"}));
  // One tensor nested inside another (not adjacent in offset order to the end of it).
  const std::string nested = R"({"big":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                             R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                             R"("y":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})";
  EXPECT_TRUE(open_fails(file("nest.safetensors", raw_file(nested, 32)), {"'big'", "overlap"}));
}

TEST_F(SafetensorsTest, OverlapNotHiddenByEmptyTensor) {
  // An empty tensor sorted between two overlapping ones must not hide the overlap.
  const std::string hdr = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                          R"("c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_TRUE(open_fails(file("hid.safetensors", raw_file(hdr, 16)), {"'a'", "'c'", "overlap"}));
  // An empty tensor at the same offset as a real one is fine (it owns no bytes).
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                         R"("f":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  auto f = SafetensorsFile::open(file("okempty.safetensors", raw_file(ok, 16)));
  EXPECT_EQ(f->entries().size(), 4u);
}

TEST_F(SafetensorsTest, BadMetadata) {
  EXPECT_TRUE(open_fails(file("m1.safetensors", raw_file(R"({"__metadata__":5})", 0)),
                         {"__metadata__", "not an object"}));
  EXPECT_TRUE(open_fails(file("m2.safetensors", raw_file(R"({"__metadata__":{"format":"pt","n":1}})", 0)),
                         {"__metadata__", "'n'", "not a string"}));
}

TEST_F(SafetensorsTest, MissingOrNonRegularFile) {
  EXPECT_TRUE(open_fails(dir_ + "/absent.safetensors", {"cannot open"}));
  fs::create_directories(dir_ + "/sub.safetensors");
  EXPECT_TRUE(open_fails(dir_ + "/sub.safetensors", {"sub.safetensors", "is a folder"}));
  EXPECT_TRUE(open_fails("/dev/zero", {"/dev/zero", "character device"}));
}

// Loaders find where a mapped tensor's bytes sit in its shard and read them
// with pread (the weight upload); unmapped memory and dropped files are not found.
TEST(Safetensors, MappedTensorsTellTheirShardAndOffset) {
  const std::string path = test::temp_dir("st_span") + "/w.safetensors";
  Tensor a = Tensor::from_f32({3}, {1.f, 2.f, 3.f}), b = Tensor::from_f32({2, 2}, {4.f, 5.f, 6.f, 7.f});
  write_safetensors(path, {{"a", a}, {"b", b}});
  const void* mapped_b = nullptr;
  {
    auto f = SafetensorsFile::open(path);
    const Tensor tb = f->tensor("b");
    mapped_b = tb.data();
    FileSpan span;
    ASSERT_TRUE(find_mapped_span(tb.data(), tb.nbytes(), &span));
    EXPECT_EQ(span.path, path);
    std::vector<float> got(4);
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    pread_exact(fd, path, span.offset, got.data(), tb.nbytes());
    EXPECT_TRUE(test::throws_with([&] { pread_exact(fd, path, span.offset, got.data(), 1 << 20); },
                                  {path, "end of file"}));
    ::close(fd);
    EXPECT_EQ(std::memcmp(got.data(), b.data(), b.nbytes()), 0);
    EXPECT_FALSE(find_mapped_span(a.data(), a.nbytes(), &span));  // plain host memory
  }
  FileSpan gone;
  EXPECT_FALSE(find_mapped_span(mapped_b, 16, &gone));  // the mapping was dropped with the file
}

// The streamed writer (one tensor in memory at a time, for release-width
// shards) gives write_safetensors' bytes; a made tensor that does not match its
// spec is an error naming it, and nothing is left under the path.
TEST(Safetensors, StreamedWriterGivesTheSameBytes) {
  const std::string dir = test::temp_dir("st_stream");
  const Tensor a = Tensor::from_f32({3}, {1.f, 2.f, 3.f}), b = Tensor::from_f32({2, 2}, {4.f, 5.f, 6.f, 7.f}).to(DType::BF16);
  write_safetensors(dir + "/whole.safetensors", {{"b", b}, {"a", a}}, {{"format", "pt"}});
  const std::vector<SafetensorsSpec> specs = {{"b", b.shape(), b.dtype()}, {"a", a.shape(), a.dtype()}};
  int made = 0;
  write_safetensors_streamed(dir + "/streamed.safetensors", specs, [&](size_t i) { ++made; return i == 0 ? b : a; },
                             {{"format", "pt"}}, false);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(read_text_file(dir + "/streamed.safetensors"), read_text_file(dir + "/whole.safetensors"));
  EXPECT_TRUE(test::throws_with(
      [&] { write_safetensors_streamed(dir + "/bad.safetensors", specs, [&](size_t) { return a; }); },
      {dir + "/bad.safetensors", "'b'", "expected"}));
  EXPECT_FALSE(fs::exists(dir + "/bad.safetensors"));
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

}  // namespace
}  // namespace magi2
