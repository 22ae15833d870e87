// torch.save zip checkpoints: the golden TurboVAE and Wan2.2 files (names,
// shapes, values), a round trip through the writer, and one clear error per
// kind of bad input (not a zip, truncated, missing storage, disallowed pickle
// global/opcode, missing dict key, unsupported dtype, out-of-bounds view).
#include <gtest/gtest.h>
#include <zip.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "io/mmap_file.h"
#include "io/torch_zip.h"
#include "util/testing.h"

namespace magi2 {
namespace {

using test::throws_with;
using namespace std::string_literals;

std::string golden(const std::string& rel) { return test::golden_dir() + "/" + rel; }

std::string read_bytes(const std::string& path) { return read_text_file(path); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

TEST(TorchZip, TurboVaeGoldenCheckpoint) {
  const std::string path = golden("turbo_vae_tiny/checkpoint.ckpt");
  TorchStateDict sd = load_torch_checkpoint(path, "ema_state_dict");
  EXPECT_EQ(sd.size(), 82u);
  EXPECT_EQ(sd.names().front(), "module.decoder.conv_in.conv.weight");
  const Tensor& w = sd.get("module.decoder.conv_in.conv.weight");
  EXPECT_EQ(w.shape(), (Shape{24, 48, 3, 3, 3}));
  EXPECT_EQ(w.dtype(), DType::F32);
  EXPECT_EQ(sd.get("module.decoder.conv_in.conv.bias").shape(), (Shape{24}));
  EXPECT_TRUE(sd.contains("module.aligned_feature_projection_heads.0.weight"));
  EXPECT_EQ(torch_checkpoint_keys(path), std::vector<std::string>{"ema_state_dict"});
  EXPECT_TRUE(throws_with([&] { sd.get("module.nope"); }, {path, "module.nope"}));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(path, "state_dict"); }, {path, "state_dict", "ema_state_dict"}));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(path); }, {path, "ema_state_dict", "not a tensor"}));
}

TEST(TorchZip, WanGoldenCheckpointMatchesItsFixture) {
  const std::string path = golden("wan22_vae_encoder_tiny/Wan2.2_VAE.pth");
  TorchStateDict sd = load_torch_checkpoint(path);
  EXPECT_EQ(sd.size(), 196u);
  EXPECT_EQ(sd.get("encoder.conv1.weight").shape().size(), 5u);
  for (const auto& n : sd.names()) {
    const Tensor& t = sd.get(n);
    EXPECT_TRUE(t.is_contiguous()) << n;
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 64); ++i) ASSERT_TRUE(std::isfinite(t.get_f32(i))) << n;
  }
}

TEST(TorchZip, RoundTripThroughTheWriter) {
  const std::string dir = test::temp_dir("torch_zip");
  std::vector<std::pair<std::string, Tensor>> ts;
  ts.emplace_back("module.a.weight", Tensor::from_f32({2, 3}, {1, -2, 3.5f, 0, 1e-30f, 7}));
  ts.emplace_back("module.b", Tensor::from_f32({3}, {1.5f, -0.25f, 3.14159f}).to(DType::BF16));
  ts.emplace_back("h", Tensor::from_f32({1, 2}, {65504, -1e-5f}).to(DType::F16));
  Tensor i64 = Tensor::empty({2}, DType::I64);
  i64.data_as<int64_t>()[0] = (int64_t{1} << 40) + 3;
  i64.data_as<int64_t>()[1] = -5;
  ts.emplace_back("count", i64);
  ts.emplace_back("scalar", Tensor::from_f32({}, {2.5f}));
  ts.emplace_back("cols", Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6}).slice_cols(1, 3));  // strided input
  const std::string path = dir + "/checkpoint.ckpt";
  write_torch_checkpoint(path, ts, "ema_state_dict");
  TorchStateDict sd = load_torch_checkpoint(path, "ema_state_dict");
  ASSERT_EQ(sd.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(sd.names()[i], ts[i].first);
    const Tensor& got = sd.get(ts[i].first);
    const Tensor want = ts[i].first == "cols" ? Tensor::from_f32({2, 2}, {2, 3, 5, 6}) : ts[i].second;
    EXPECT_EQ(got.shape(), want.shape()) << ts[i].first;
    EXPECT_EQ(got.dtype(), want.dtype()) << ts[i].first;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0) << ts[i].first;
  }
  // Unwrapped form, and the writer's duplicate/dtype checks.
  write_torch_checkpoint(dir + "/plain.pth", {ts[0]});
  EXPECT_EQ(load_torch_checkpoint(dir + "/plain.pth").names(), std::vector<std::string>{"module.a.weight"});
  EXPECT_TRUE(throws_with([&] { write_torch_checkpoint(dir + "/dup.pth", {ts[0], ts[0]}); }, {"module.a.weight", "twice"}));
  EXPECT_TRUE(throws_with(
      [&] { write_torch_checkpoint(dir + "/f8.pth", {{"x", Tensor::from_f32({1}, {1}).to(DType::F8E4M3)}}); },
      {"F8"}));
}

// ------------------------------------------------------------- bad inputs

// Writes a stored zip with the given entries (libzip directly, so a test can
// put any pickle bytes in data.pkl).
void make_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& entries) {
  int code = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  ASSERT_NE(z, nullptr);
  for (const auto& [name, bytes] : entries) {
    zip_source_t* s = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
    const zip_int64_t idx = zip_file_add(z, name.c_str(), s, 0);
    ASSERT_GE(idx, 0);
    ASSERT_EQ(zip_set_file_compression(z, static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0), 0);
  }
  ASSERT_EQ(zip_close(z), 0);
}

std::string u32le(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}
// Concatenation by append (operator+ on a literal trips a GCC 12 -Wrestrict false positive).
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (auto p : parts) s.append(p);
  return s;
}
std::string ustr(const std::string& s) { return cat({"X", u32le(static_cast<uint32_t>(s.size())), s}); }

// Pickle of {"w": tensor} over storage "0" of `storage_type` with `numel`
// elements, viewed at `offset` with the given size/stride (one dimension).
std::string tensor_pickle(const std::string& storage_type, int numel, int offset, int size, int stride) {
  return cat({"\x80\x02}", ustr("w"), "ctorch._utils\n_rebuild_tensor_v2\n((", ustr("storage"), "ctorch\n",
              storage_type, "\n", ustr("0"), ustr("cpu"), "J", u32le(numel), "tQJ", u32le(offset), "(J", u32le(size),
              "t(J", u32le(stride), "t\x89}tRs."});
}

class TorchZipBad : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir("torch_zip_bad"); }
  // A checkpoint "<name>.ckpt" with this pickle and `storage` as data/0.
  std::string ckpt(const std::string& name, const std::string& pkl, const std::string& storage = std::string(16, '\0'),
                   const std::string& byteorder = "little") {
    const std::string p = dir_ + "/" + name + ".ckpt";
    make_zip(p, {{"a/data.pkl", pkl}, {"a/byteorder", byteorder}, {"a/data/0", storage}, {"a/version", "3\n"}});
    return p;
  }
  std::string dir_;
};

TEST_F(TorchZipBad, HandMadeFileLoads) {
  std::string storage(16, '\0');
  const float v[4] = {1, 2, 3, 4};
  std::memcpy(storage.data(), v, 16);
  const std::string p = ckpt("ok", tensor_pickle("FloatStorage", 4, 1, 2, 2), storage);  // elements 1 and 3
  TorchStateDict sd = load_torch_checkpoint(p);
  ASSERT_EQ(sd.get("w").numel(), 2);
  EXPECT_EQ(sd.get("w").get_f32(0), 2.0f);
  EXPECT_EQ(sd.get("w").get_f32(1), 4.0f);
}

TEST_F(TorchZipBad, ParametersAndStateDictMetadataLoad) {
  // nn.Module.state_dict() as torch.save writes it: an OrderedDict of
  // _rebuild_parameter records whose `_metadata` attribute arrives by BUILD.
  // (No NUL bytes in the literals: cat() takes them as C strings.)
  std::string storage(8, '\0');
  const float v[2] = {0.25f, -4.f};
  std::memcpy(storage.data(), v, 8);
  const std::string tensor = cat({"ctorch._utils\n_rebuild_tensor_v2\n((", ustr("storage"), "ctorch\nFloatStorage\n",
                                  ustr("0"), ustr("cuda:0"), "K\x02tQJ", u32le(0), "(K\x02t(K\x01t\x89", "ccollections\nOrderedDict\n)RtR"});
  const std::string pkl = cat({"\x80\x02", "ccollections\nOrderedDict\n)Rq\x01(", ustr("layer.weight"),
                               "ctorch._utils\n_rebuild_parameter\n(", tensor, "\x88}tRu", "}", ustr("_metadata"), "}",
                               ustr(""), "}", ustr("version"), "K\x01sssb."});
  const std::string p = ckpt("param", pkl, storage);
  TorchStateDict sd = load_torch_checkpoint(p);
  ASSERT_EQ(sd.names(), std::vector<std::string>{"layer.weight"});
  EXPECT_EQ(sd.get("layer.weight").get_f32(1), -4.f);
}

TEST_F(TorchZipBad, NotAZipTruncatedAndMissing) {
  const std::string junk = dir_ + "/junk.ckpt";
  write_bytes(junk, "hello, not a zip");
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(junk); }, {junk, "cannot open"}));
  const std::string good = ckpt("good", tensor_pickle("FloatStorage", 4, 0, 4, 1));
  const std::string bytes = read_bytes(good);
  const std::string cut = dir_ + "/cut.ckpt";
  write_bytes(cut, bytes.substr(0, bytes.size() - 30));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(cut); }, {cut}));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(dir_ + "/absent.ckpt"); }, {"absent.ckpt"}));
  const std::string nopkl = dir_ + "/nopkl.ckpt";
  make_zip(nopkl, {{"a/data/0", "x"}});
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(nopkl); }, {nopkl, "data.pkl"}));
  const std::string short_storage = ckpt("short", tensor_pickle("FloatStorage", 4, 0, 4, 1), std::string(8, '\0'));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(short_storage); }, {short_storage, "storage '0'", "8 bytes"}));
  const std::string be = ckpt("be", tensor_pickle("FloatStorage", 4, 0, 4, 1), std::string(16, '\0'), "big");
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(be); }, {be, "byteorder"}));
}

TEST_F(TorchZipBad, CorruptDataFailsTheCrc) {
  const std::string p = ckpt("crc", tensor_pickle("FloatStorage", 4, 0, 4, 1), std::string(16, '\x11'));
  std::string bytes = read_bytes(p);
  const size_t at = bytes.find(std::string(16, '\x11'));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] = '\x12';
  write_bytes(p, bytes);
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(p); }, {p, "data/0"}));
}

TEST_F(TorchZipBad, DisallowedGlobalsAndOpcodesAreNamedNotRun) {
  const std::string evil = ckpt("evil", cat({"\x80\x02" "cposix\nsystem\n", ustr("touch pwned"), "\x85R."}));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(evil); }, {evil, "posix.system", "not allowed"}));
  const std::string evil2 = ckpt("evil2", cat({"\x80\x02" "cbuiltins\neval\n", ustr("1"), "\x85R."}));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(evil2); }, {"builtins.eval", "not allowed"}));
  // INST (text opcode that instantiates a class) is outside the accepted set.
  const std::string inst = ckpt("inst", "\x80\x02(ios\nsystem\n.");
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(inst); }, {inst, "opcode 0x69", "not supported"}));
  const std::string storage_call = ckpt("call", "\x80\x02" "ctorch\nFloatStorage\n)R.");
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(storage_call); }, {"torch.FloatStorage", "not allowed"}));
  const std::string trunc = ckpt("trunc", cat({"\x80\x02}", ustr("w").substr(0, 3)}));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(trunc); }, {trunc, "truncated"}));
  std::string deep = "\x80\x02";
  for (int i = 0; i < 100; ++i) deep += "]";
  for (int i = 0; i < 99; ++i) deep += "a";
  deep += ".";
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(ckpt("deep", deep)); }, {"nested deeper"}));
}

TEST_F(TorchZipBad, StackAndMarkDisciplineIsChecked) {
  // TUPLE1 right after a MARK would reach below it (it used to shrink the
  // stack under the mark, and the next 't' then crashed in libstdc++).
  const std::string below = ckpt("below", "\x80\x02K\x01(\x85t.");
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(below); }, {below, "TUPLE at byte 5", "above the last MARK"}));
  for (const std::string& op : {"s"s, "a"s, "R"s, "b"s, "\x93"s, "Q"s, "q\0"s}) {
    const std::string p = cat({"\x80\x02}K\x01(", op, "t."});
    ASSERT_EQ(p.size(), 6 + op.size() + 2);
    const std::string path = ckpt("op", p);
    EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(path); }, {path, "above the last MARK"})) << op;
  }
  const std::string unbalanced = ckpt("unbalanced", "\x80\x02K\x01K\x02.");
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(unbalanced); }, {"not balanced at STOP"}));
  const std::string nomark = ckpt("nomark", "\x80\x02}u.");
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(nomark); }, {"no MARK"}));
}

TEST_F(TorchZipBad, MemoAndObjectsAreBoundedByTheStream) {
  // A memo index far beyond the stream costs one slot, not a 4-billion-entry table.
  const std::string far = ckpt("far", "\x80\x02}r\xf0\xff\xff\xffj\xf0\xff\xff\xff" "h\x01.");
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(far); }, {far, "memo index 1 was never written"}));
  // One byte per object: more objects than such a stream can honestly describe.
  const std::string nones = ckpt("nones", cat({"\x80\x02(", std::string(4000, 'N'), "l."}));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(nones); }, {nones, "more objects than"}));
}

TEST_F(TorchZipBad, LargeDictsFillInLinearTime) {
  // 200k SETITEM opcodes on one dict: each adds one entry in place (a copy per
  // opcode made this quadratic). The values are ints, so loading then stops
  // at the first non-tensor entry.
  std::string pkl = "\x80\x02}q"s + '\0';
  for (int i = 0; i < 200000; ++i) pkl += cat({ustr(str_cat("k", i)), "K\x01s"});
  pkl += ".";
  const std::string p = ckpt("big", pkl);
  EXPECT_EQ(torch_checkpoint_keys(p).size(), 200000u);
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(p); }, {p, "'k0'", "not a tensor"}));
}

TEST_F(TorchZipBad, RecursiveStructuresAreRefused) {
  const std::string self = ckpt("self", "\x80\x02]q\0h\0" "a."s);
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(self); }, {self, "inserted into itself"}));
  // L1 nested in L2, then L1 changed: the graph could close a cycle.
  const std::string later = ckpt("later", "\x80\x02]q\0]h\0" "ah\0K\x01" "a."s);
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(later); }, {later, "after being nested"}));
}

TEST_F(TorchZipBad, BadTensorRecords) {
  // A stride-0 view of 2e9 elements over a 4-element storage: refused before
  // anything is allocated.
  const std::string bomb = ckpt("bomb", tensor_pickle("FloatStorage", 4, 0, 2000000000, 0));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(bomb); }, {bomb, "'w'", "2000000000 elements", "storage only 4"}));
  const std::string oob = ckpt("oob", tensor_pickle("FloatStorage", 4, 2, 3, 1));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(oob); }, {oob, "'w'", "beyond its storage"}));
  const std::string dbl = ckpt("dbl", tensor_pickle("DoubleStorage", 2, 0, 2, 1));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(dbl); }, {dbl, "'w'", "DoubleStorage"}));
  const std::string unk = ckpt("unk", tensor_pickle("QUInt8Storage", 2, 0, 2, 1));
  EXPECT_TRUE(throws_with([&] { load_torch_checkpoint(unk); }, {"torch.QUInt8Storage", "not allowed"}));
}

}  // namespace
}  // namespace magi2
