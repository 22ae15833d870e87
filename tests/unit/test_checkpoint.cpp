// Checkpoint: the HF sharded layout (model.safetensors.index.json + shards), the
// single-file fallbacks, the golden tiny DiT checkpoint, and one clear error per
// inconsistency between the index and the shards.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/mmap_file.h"
#include "util/testing.h"

namespace magi2 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using test::throws_with;

::testing::AssertionResult open_fails(const std::string& path, std::initializer_list<std::string> words) {
  return throws_with([&] { Checkpoint::open(path); }, words);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

const char* kShard1 = "model-00001-of-00002.safetensors";
const char* kShard2 = "model-00002-of-00002.safetensors";

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::temp_dir("checkpoint");
    a_ = Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6});
    b_ = Tensor::from_f32({4}, {-1, -2, -3, -4}).to(DType::BF16);
    c_ = Tensor::from_f32({1, 2}, {0.5f, 0.25f});
  }
  // A fresh folder <root>/<name> holding the two standard shards (a, b | c) and,
  // unless `index` is empty, that index text.
  std::string folder(const std::string& name, const std::string& index) {
    const std::string d = root_ + "/" + name;
    fs::create_directories(d);
    write_safetensors(d + "/" + kShard1, {{"layer.a", a_}, {"layer.b", b_}});
    write_safetensors(d + "/" + kShard2, {{"layer.c", c_}});
    if (!index.empty()) write_text(d + "/model.safetensors.index.json", index);
    return d;
  }
  // The index that matches the standard shards, as JSON to be edited by each test.
  json good_index() const {
    return {{"metadata", {{"total_size", a_.nbytes() + b_.nbytes() + c_.nbytes()}}},
            {"weight_map", {{"layer.a", kShard1}, {"layer.b", kShard1}, {"layer.c", kShard2}}}};
  }
  std::string root_;
  Tensor a_, b_, c_;
};

// ---------------------------------------------------------------- layouts

TEST_F(CheckpointTest, ShardedRoundTrip) {
  const std::string d = folder("sharded", good_index().dump(2));
  Checkpoint ck = Checkpoint::open(d);
  EXPECT_EQ(ck.path(), d);
  EXPECT_EQ(ck.num_shards(), 2u);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"layer.a", "layer.b", "layer.c"}));
  EXPECT_EQ(ck.total_bytes(), a_.nbytes() + b_.nbytes() + c_.nbytes());
  EXPECT_TRUE(ck.contains("layer.c"));
  EXPECT_FALSE(ck.contains("layer.d"));
  EXPECT_EQ(ck.entry("layer.b").dtype, DType::BF16);
  EXPECT_EQ(ck.entry("layer.b").shape, (Shape{4}));

  Tensor a = ck.tensor("layer.a");
  ASSERT_EQ(a.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.get_f32(i), static_cast<float>(i + 1));
  Tensor b = ck.tensor("layer.b");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.get_f32(i), -static_cast<float>(i + 1));
  EXPECT_EQ(ck.tensor("layer.c").get_f32(1), 0.25f);

  EXPECT_TRUE(throws_with([&] { ck.tensor("layer.d"); }, {d, "'layer.d'"}));
  EXPECT_TRUE(throws_with([&] { ck.entry("layer.d"); }, {d, "'layer.d'"}));

  // Views stay valid after the Checkpoint (and its shard objects) are gone.
  Tensor kept;
  { kept = Checkpoint::open(d).tensor("layer.c"); }
  EXPECT_EQ(kept.get_f32(0), 0.5f);
}

TEST_F(CheckpointTest, SingleFileLayouts) {
  const std::string d = root_ + "/single";
  fs::create_directories(d);
  write_safetensors(d + "/model.safetensors", {{"x", a_}, {"y", c_}});
  Checkpoint ck = Checkpoint::open(d);  // folder without index: model.safetensors
  EXPECT_EQ(ck.num_shards(), 1u);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"x", "y"}));
  Checkpoint f = Checkpoint::open(d + "/model.safetensors");  // a file directly
  EXPECT_EQ(f.names(), ck.names());
  EXPECT_EQ(f.tensor("x").get_f32(5), 6.0f);
}

TEST(CheckpointGolden, TinyDitOpensWith131Tensors) {
  const std::string d = test::golden_dir() + "/dit_tiny/ckpt";
  if (!fs::exists(d)) GTEST_SKIP() << "golden checkpoint not found at " << d;
  Checkpoint ck = Checkpoint::open(d);
  EXPECT_EQ(ck.names().size(), 131u);
  EXPECT_EQ(ck.num_shards(), 2u);
  // The index's declared total agrees with the bytes actually described by the shards.
  const json idx = json::parse(read_text_file(d + "/model.safetensors.index.json"));
  EXPECT_EQ(ck.total_bytes(), idx["metadata"]["total_size"].get<size_t>());
  EXPECT_EQ(idx["weight_map"].size(), 131u);
  for (const auto& n : ck.names()) {
    const SafetensorsEntry& e = ck.entry(n);
    EXPECT_EQ(static_cast<size_t>(ck.tensor(n).nbytes()), e.end - e.begin) << n;
  }
  EXPECT_TRUE(ck.contains("block.layers.0.attention.linear_qkv.weight"));
}

// ---------------------------------------------------------------- errors

TEST_F(CheckpointTest, MissingFolder) {
  const std::string p = root_ + "/does_not_exist";
  EXPECT_TRUE(open_fails(p, {p, "does not exist"}));
}

TEST_F(CheckpointTest, FolderWithoutIndexOrModel) {
  const std::string d = root_ + "/emptyish";
  fs::create_directories(d);
  // A stray shard is not enough: without an index nothing says which tensors belong.
  write_safetensors(d + "/" + kShard1, {{"layer.a", a_}});
  EXPECT_TRUE(open_fails(d, {d, "model.safetensors.index.json", "model.safetensors"}));
}

TEST_F(CheckpointTest, IndexNotJson) {
  const std::string d = folder("badjson", "{\"weight_map\": {");
  EXPECT_TRUE(open_fails(d, {d + "/model.safetensors.index.json", "not valid JSON"}));
}

TEST_F(CheckpointTest, IndexWithoutWeightMap) {
  const std::string idx = "/model.safetensors.index.json";
  std::string d = folder("nomap", R"({"metadata": {"total_size": 1}})");
  EXPECT_TRUE(open_fails(d, {d + idx, "weight_map"}));
  d = folder("mapnotobject", R"({"weight_map": ["layer.a"]})");
  EXPECT_TRUE(open_fails(d, {d + idx, "weight_map"}));
  d = folder("indexarray", R"([1, 2])");
  EXPECT_TRUE(open_fails(d, {d + idx, "weight_map"}));
}

TEST_F(CheckpointTest, WeightMapValueNotAFileName) {
  json j = good_index();
  j["weight_map"]["layer.c"] = 2;
  std::string d = folder("nonstring", j.dump());
  EXPECT_TRUE(open_fails(d, {"'layer.c'", "not a file name"}));
  // Shards must live in the folder itself: no paths that escape it.
  j = good_index();
  j["weight_map"]["layer.c"] = std::string("../") + kShard2;
  d = folder("escape", j.dump());
  EXPECT_TRUE(open_fails(d, {"plain file name", kShard2}));
}

TEST_F(CheckpointTest, ShardNamedInIndexMissing) {
  json j = good_index();
  j["weight_map"]["layer.d"] = "model-00003-of-00002.safetensors";
  const std::string d = folder("missingshard", j.dump());
  EXPECT_TRUE(open_fails(d, {d, "model-00003-of-00002.safetensors", "missing"}));
}

TEST_F(CheckpointTest, TensorMappedToShardThatLacksIt) {
  json j = good_index();
  j["weight_map"]["layer.c"] = kShard1;  // it is really in shard 2
  const std::string d = folder("wrongshard", j.dump());
  EXPECT_TRUE(open_fails(d, {d, "'layer.c'", kShard1, "does not contain"}));
}

TEST_F(CheckpointTest, TensorInShardButNotInWeightMap) {
  json j = good_index();
  j["weight_map"].erase("layer.b");
  const std::string d = folder("unlisted", j.dump());
  EXPECT_TRUE(open_fails(d, {d, "'layer.b'", kShard1, "not listed"}));
}

TEST_F(CheckpointTest, TensorInTwoShards) {
  // layer.a is mapped to shard 1, but shard 2 carries a second copy of it.
  const std::string d = folder("twice", good_index().dump());
  write_safetensors(d + "/" + kShard2, {{"layer.a", a_}, {"layer.c", c_}});
  EXPECT_TRUE(open_fails(d, {d, "'layer.a'", kShard1, kShard2}));
}

TEST_F(CheckpointTest, CorruptShardNamesTheShard) {
  const std::string d = folder("corrupt", good_index().dump());
  write_text(d + "/" + kShard2, "abc");
  EXPECT_TRUE(open_fails(d, {std::string(kShard2), "truncated"}));
}

}  // namespace
}  // namespace magi2
