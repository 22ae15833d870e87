#include "engine/quantize_model.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "engine/model_files.h"
#include "io/checkpoint.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "ops/fp8_blocks.h"

namespace magi2 {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

// Removes the temporary folder unless the build completed (then it was renamed).
struct TempDir {
  fs::path path;
  bool keep = false;
  ~TempDir() {
    if (keep) return;
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A file carried over unchanged: a hard link where the file system allows it
// (the release text encoder and VAEs are tens of GB), else a copy.
void carry_file(const fs::path& from, const fs::path& to) {
  fs::create_directories(to.parent_path());
  std::error_code ec;
  fs::create_hard_link(from, to, ec);
  if (!ec) return;
  if (!fs::copy_file(from, to, fs::copy_options::none, ec) || ec)
    throw Error(str_cat("quantize: cannot copy '", from.string(), "' to '", to.string(), "': ", ec.message()));
}

// One shard rewritten: routed expert banks -> FP8 + scales, the rest as is.
void write_shard(const SafetensorsFile& in, const fs::path& to, QuantizeSummary& sum,
                 nlohmann::json* weight_map, const std::string& shard_name) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const SafetensorsEntry& e : in.entries()) {
    Tensor t = in.tensor(e.name);
    sum.bytes_in += t.nbytes();
    if (is_routed_expert_weight(e.name)) {
      MAGI2_CHECK(e.dtype != DType::F8E4M3, "quantize: '", in.path(), "': ", e.name, " is already F8_E4M3");
      Fp8Blocks b = quantize_fp8_blocks(t, str_cat("'", in.path(), "': ", e.name));
      tensors.emplace_back(e.name, b.q);
      tensors.emplace_back(fp8_scale_name(e.name), b.scale_inv);
      if (weight_map) (*weight_map)[fp8_scale_name(e.name)] = shard_name;
      sum.quantized += 1;
    } else {
      tensors.emplace_back(e.name, t);
    }
  }
  for (const auto& [n, t] : tensors) sum.bytes_out += t.nbytes();
  sum.tensors += tensors.size();
  std::map<std::string, std::string> meta = in.metadata();
  meta["magi2_quantization"] = "routed experts F8_E4M3, 128x128 block scales <name>_scale_inv (w = q * scale)";
  write_safetensors(to.string(), tensors, meta);
}

}  // namespace

QuantizeSummary quantize_model(const std::string& model, const std::string& out, const std::string& config_path) {
  QuantizeSummary sum;
  sum.transformer_dir = find_transformer_dir(model);
  MAGI2_CHECK(!fs::exists(out), "quantize: output folder '", out, "' already exists");
  const fs::path out_abs = fs::absolute(out);
  MAGI2_CHECK(fs::is_directory(out_abs.parent_path()), "quantize: folder '", out_abs.parent_path().string(),
              "' (the parent of the output) does not exist");
  // Bind first: a checkpoint that does not match its config writes nothing.
  const fs::path root = fs::is_directory(model) ? fs::path(model) : fs::path(model).parent_path();
  {
    const Checkpoint ckpt = Checkpoint::open(sum.transformer_dir);
    const Magi2Config cfg = config_for_model(fs::path(sum.transformer_dir) == root ? "" : root.string(), config_path);
    const DitWeights w = bind_dit(ckpt, cfg);
    MAGI2_CHECK(!w.fp8_experts(), "quantize: the routed experts of '", sum.transformer_dir, "' are already FP8");
  }
  TempDir tmp{fs::path(out_abs.string() + ".tmp." + std::to_string(::getpid()))};
  fs::remove_all(tmp.path);
  fs::create_directories(tmp.path);
  const fs::path src_dit = fs::canonical(sum.transformer_dir);
  const fs::path src_root = fs::canonical(root);
  {
    const fs::path rel_out = fs::relative(fs::weakly_canonical(out_abs), src_root);
    MAGI2_CHECK(rel_out.empty() || *rel_out.begin() == "..", "quantize: the output folder '", out,
                "' must not be inside the model folder '", src_root.string(), "'");
  }
  const fs::path rel_dit = fs::relative(src_dit, src_root);  // "preview", or "." for a bare DiT folder
  const fs::path dst_dit = tmp.path / rel_dit;
  fs::create_directories(dst_dit);

  // The DiT: each shard rewritten, the index updated; other files of the folder carried.
  const fs::path index = src_dit / kIndexName;
  std::vector<std::string> shards;
  nlohmann::json index_json;
  if (fs::exists(index)) {
    index_json = parse_json_text(read_text_file(index.string()), str_cat("checkpoint index '", index.string(), "'"));
    for (auto it = index_json["weight_map"].begin(); it != index_json["weight_map"].end(); ++it) {
      const std::string f = it.value().get<std::string>();
      if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
    }
  } else {
    shards.push_back("model.safetensors");
  }
  for (const std::string& f : shards) {
    auto in = SafetensorsFile::open((src_dit / f).string());
    write_shard(*in, dst_dit / f, sum, index_json.is_null() ? nullptr : &index_json["weight_map"], f);
  }
  if (!index_json.is_null()) {
    index_json["metadata"]["total_size"] = sum.bytes_out;
    write_file_atomic((dst_dit / kIndexName).string(), index_json.dump(2) + "\n");
  }
  auto is_rewritten = [&](const fs::path& p) {
    if (p.parent_path() != src_dit) return false;
    const std::string n = p.filename().string();
    return n == kIndexName || std::find(shards.begin(), shards.end(), n) != shards.end();
  };
  for (const auto& e : fs::recursive_directory_iterator(src_root)) {
    if (!e.is_regular_file()) continue;
    const fs::path p = fs::canonical(e.path());
    if (is_rewritten(p)) continue;
    carry_file(p, tmp.path / fs::relative(e.path(), src_root));
    sum.files_copied += 1;
  }
  std::error_code ec;
  fs::rename(tmp.path, out_abs, ec);
  MAGI2_CHECK(!ec, "quantize: cannot rename '", tmp.path.string(), "' to '", out, "': ", ec.message());
  tmp.keep = true;
  return sum;
}

}  // namespace magi2
