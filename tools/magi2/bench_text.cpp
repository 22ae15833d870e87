#include "bench_text.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "bench_stats.h"
#include "core/error.h"
#include "models/qwen35/text_config.h"
#include "models/qwen35/text_model.h"
#include "models/qwen35/text_weights.h"
#include "ops/layer_offload.h"
#if defined(MAGI2_HAVE_CUDA)
#include "cuda/backend_cuda.h"
#include "cuda/copy_queue.h"
#endif

namespace magi2::cli {
namespace {

// FLOP of one forward over `layers` layers and `n` tokens (2 per multiply-add).
std::map<std::string, double> forward_flop(const qwen35::TextConfig& c, int layers, double n) {
  const double d = c.hidden_size, kd = c.key_dim(), vd = c.value_dim(), hv = c.linear_num_value_heads;
  const double h = c.num_attention_heads, hkv = c.num_key_value_heads, hd = c.head_dim;
  std::map<std::string, double> f;
  for (int l = 0; l < layers; ++l) {
    if (c.full_attention[l]) {
      f["text.attention"] += 2 * n * d * (2 * h * hd + 2 * hkv * hd) + 2 * n * h * hd * d;  // q|gate, k, v, o
      f["text.attention"] += 2 * h * hd * n * (n + 1);                                        // causal q k^T, p v
    } else {
      f["text.delta_net"] += 2 * n * d * (2 * kd + 2 * vd + 2 * hv) + 2 * n * vd * d;  // in_proj_*, out_proj
      f["text.delta_net"] += 2 * n * (2 * kd + vd) * c.linear_conv_kernel_dim;
      f["text.delta_net"] += 7 * n * hv * c.linear_key_head_dim * c.linear_value_head_dim;  // the recurrence
    }
    f["text.mlp"] += 2 * n * d * 3 * c.intermediate_size;
  }
  return f;
}

}  // namespace

nlohmann::json bench_text(const TextBenchArgs& a, Backend& be) {
  MAGI2_CHECK(be.device() == Device::CUDA,
              "bench --stage text needs the CUDA backend (a GPU and --device auto|cuda): at the release widths the CPU "
              "backend takes minutes per forward");
  const qwen35::TextConfig cfg = qwen35::TextConfig::qwen35_27b();
  const int feature_layers = cfg.num_hidden_layers - qwen35::kOfficialSkipLayer;  // 62: hidden_states[-3]
  MAGI2_CHECK(a.layers >= 0 && a.layers <= feature_layers, "--layers must be in [0, ", feature_layers, "], got ",
              a.layers);
  const int layers = a.layers == 0 ? feature_layers : a.layers;
  for (int64_t n : a.tokens)
    MAGI2_CHECK(n >= 1 && n <= 7000, "--text-tokens must be in [1, 7000] (the official limit), got ", n);

  // Weights on the device: matrices uniform with sd 1/sqrt(fan in), the plain
  // gated-norm gain 1, the other gains and DeltaNet scalars 0.
  const auto t_w = bench_clock::now();
  uint64_t weight_bytes = 0, seed = 31;
  qwen35::TextWeights w = qwen35::TextWeights::generate(
      cfg, DType::BF16, layers, [&](const std::string& name, const Shape& shape, DType dt) -> Tensor {
        Tensor t = be.alloc(shape, dt);
        weight_bytes += t.nbytes();
        if (name.ends_with("linear_attn.norm.weight")) {
          be.copy({.src = Tensor::from_f32(shape, std::vector<float>(static_cast<size_t>(shape[0]), 1.f)), .dst = t});
        } else if (shape.size() == 2) {
#if defined(MAGI2_HAVE_CUDA)
          cuda_fill_random(be, t, ++seed, static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape[1]))));
#endif
        } else {
          be.zero(t);
        }
        // --offload layerwise streams from host memory: the drawn tensor moves there.
        return a.offload ? to_host(be, t) : t;
      });
  be.synchronize();
  const double weights_ms = ms_since(t_w);
  std::unique_ptr<LayerOffload> offload;
#if defined(MAGI2_HAVE_CUDA)
  if (a.offload) {
    offload = std::make_unique<LayerOffload>(w.bound_layer_tensors(cfg), be, cuda_copy_queue(be, 2), "text encoder");
    w = w.to_backend_streamed(cfg, be, *offload);
  }
#endif
  const qwen35::TextModel model(cfg, w, be, layers - 1, offload.get());

  nlohmann::json runs = nlohmann::json::array();
  for (const int64_t n : a.tokens) {
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[i] = (i * 7919 + 17) % cfg.vocab_size;
    std::vector<double> ms;
    double first_ms = 0;
    for (int i = 0; i < a.warmup + a.steps; ++i) {
      be.synchronize();
      const auto t0 = bench_clock::now();
      (void)model.forward(ids);
      be.synchronize();
      if (i == 0) first_ms = ms_since(t0);
      if (i >= a.warmup) ms.push_back(ms_since(t0));
    }
    std::map<std::string, double> regions;
#if defined(MAGI2_HAVE_CUDA)
    if (a.profile) {
      cuda_profile_begin(be);
      (void)model.forward(ids);
      regions = cuda_profile_end(be);
    }
#endif
    const std::map<std::string, double> flop = forward_flop(cfg, layers, static_cast<double>(n));
    double total = 0;
    for (const auto& [k, v] : flop) total += v;
    const double fwd = median(ms);
    nlohmann::json comp = nlohmann::json::object();
    for (const auto& [name, t] : regions) {
      const double f = flop.count(name) ? flop.at(name) : 0.0;
      comp[name] = {{"ms", t}, {"tflops", f > 0 ? f / (t * 1e-3) / 1e12 : 0.0}};
    }
    nlohmann::json r = {{"tokens", n},
                        {"forward_ms", ms},
                        {"forward_ms_median", fwd},
                        {"first_forward_ms", first_ms},
                        {"forward_flop", total},
                        {"tflops", total / (fwd * 1e-3) / 1e12},
                        {"flop", flop},
                        {"feature_layers_ms_estimate", fwd * feature_layers / layers}};
    if (!regions.empty()) r["components_eager_ms"] = comp;
    runs.push_back(r);
  }
  nlohmann::json j = {{"stage", "text"},
                      {"layers", layers},
                      {"feature_layers", feature_layers},
                      {"weights_bytes", weight_bytes},
                      {"weights_generate_ms", weights_ms},
                      {"offload", offload ? "layerwise" : "none"},
                      {"runs", runs}};
  if (offload) {
    // The eager forwards' copies: every layer once per forward.
    const CopyQueueStats st = offload->stats();
    j["pcie_bytes_per_forward"] = offload->bytes_per_forward();
    j["pcie_gb_per_s"] = st.gb_per_s();
    j["offload_slot_bytes"] = offload->slot_bytes();
    j["offload_pinned_host_bytes"] = offload->pinned_bytes();
  }
#if defined(MAGI2_HAVE_CUDA)
  const CudaMemoryStats m = cuda_memory_stats(be);
  j["memory"] = {{"peak_allocated_bytes", m.peak_in_use}, {"device_total_bytes", m.device_total}};
#endif
  return j;
}

}  // namespace magi2::cli
