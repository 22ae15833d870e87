// Loads the tiny golden DiT (shared/golden/dit_tiny) and its packed inputs.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/magi2_dit/config.h"
#include "models/magi2_dit/dit.h"
#include "models/magi2_dit/weights.h"
#include "util/testing.h"

namespace magi2::test {

/// The tiny golden model, bound once per test binary.
struct GoldenDit {
  Magi2Config config;
  Checkpoint ckpt;
  DitWeights weights;
  std::shared_ptr<SafetensorsFile> io;

  static GoldenDit& get() {
    static GoldenDit g = [] {
      const std::string dir = golden_dir() + "/dit_tiny";
      GoldenDit x{Magi2Config::from_file(dir + "/config.json"), Checkpoint::open(dir + "/ckpt"), {}, nullptr};
      x.weights = DitWeights::bind(x.ckpt, x.config.arch);
      x.io = SafetensorsFile::open(dir + "/dit_io.safetensors");
      return x;
    }();
    return g;
  }

  /// Packed inputs `{prefix}in_*` as DitInputs.
  DitInputs inputs(const std::string& prefix) const {
    DitInputs in;
    in.x = io->tensor(prefix + "in_x");
    in.coords = io->tensor(prefix + "in_coords");
    in.modality = io->tensor(prefix + "in_modality");
    in.time_emb = io->tensor(prefix + "in_time_emb");
    Tensor cu = io->tensor(prefix + "in_cu_seqlens");
    for (int64_t i = 0; i < cu.numel(); ++i) in.cu_seqlens.push_back(cu.data_as<int32_t>()[i]);
    return in;
  }

  /// Golden expert selection of every MoE layer, as I32, indexed by layer.
  std::vector<Tensor> forced_topk(const std::string& prefix) const {
    std::vector<Tensor> f(config.arch.num_layers);
    for (int l : config.arch.moe_layers) f[l] = io->tensor(prefix + "l" + std::to_string(l) + "_moe_topk_idx").to(DType::I32);
    return f;
  }

  /// Run options for natural routing at MoE layer `l` on the `prefix` inputs:
  /// the MoE layers before l forced to the golden selection (so l sees the
  /// official inputs up to bf16 noise), l and later routed naturally; each
  /// forward stores a copy of l's selection dump (l{l}_moe_topk_idx, I32
  /// [heads, tokens, k]) in *sel.
  DitRunOptions natural_routing_at(const std::string& prefix, int l, Tensor* sel) const {
    DitRunOptions opt;
    opt.forced_topk = forced_topk(prefix);
    for (int m : config.arch.moe_layers)
      if (m >= l) opt.forced_topk[m] = Tensor();
    const std::string name = str_cat("l", l, "_moe_topk_idx");
    opt.dump = [sel, name](const std::string& n, const Tensor& t) {
      if (n == name) *sel = t.clone();
    };
    return opt;
  }
};

}  // namespace magi2::test
