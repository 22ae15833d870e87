#include "bench_refiner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "core/error.h"
#include "core/seeded_random.h"
#include "models/magi2_refiner/config.h"
#include "models/magi2_refiner/refiner.h"
#include "models/magi2_refiner/tokens.h"
#include "models/magi2_refiner/weights.h"
#include "pipeline/refine.h"
#if defined(MAGI2_HAVE_CUDA)
#include "cuda/backend_cuda.h"
#endif

namespace magi2::cli {
namespace {

using clock_t_ = bench_clock;

// Random weights: matrices N-ish(0, 1/sqrt(fan_in)) drawn on the device, norm
// gains 0 (gain 1 + w = 1), biases 0, the RoPE bands the official inverse frequencies.
RefinerWeights random_refiner(const RefinerArch& arch, Backend& be, uint64_t* made_bytes) {
  uint64_t seed = 11;
  return RefinerWeights::generate(arch, [&](const std::string& name, const Shape& shape, DType dt) -> Tensor {
    Tensor t = be.alloc(shape, dt);
    *made_bytes += t.nbytes();
    if (name.ends_with("rope.bands")) {
      Tensor h = Tensor::empty(shape, DType::F32);
      for (int64_t i = 0; i < h.numel(); ++i)
        h.data_as<float>()[i] = static_cast<float>(std::pow(10000.0, -static_cast<double>(i) / h.numel()));
      be.copy({.src = h, .dst = t});
    } else if (shape.size() == 2) {
#if defined(MAGI2_HAVE_CUDA)
      if (be.device() == Device::CUDA) {
        cuda_fill_random(be, t, ++seed, static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape[1]))));
        return t;
      }
#endif
      be.zero(t);  // CPU: values do not change the cost
    } else {
      be.zero(t);
    }
    return t;
  });
}

}  // namespace

nlohmann::json bench_refiner(const RefinerBenchArgs& a, Backend& be) {
  MAGI2_CHECK(a.text_len >= 1 && a.text_len <= 100000, "--text-cond must be in [1, 100000], got ", a.text_len);
  const RefinerConfig cfg = RefinerConfig::release();
  const RefinerArch arch = cfg.arch.first_layers(a.layers, "bench --stage refiner (cut to --layers)");
  MAGI2_CHECK(a.width_px >= 16 && a.height_px >= 16 && a.frames >= 1 && a.width_px % 16 == 0 &&
                  a.height_px % 16 == 0 && a.width_px <= 8192 && a.height_px <= 8192 && a.frames <= 1024,
              "--refiner-size must be WxHxT with W, H multiples of 16 in 16..8192 and T in 1..1024, got ", a.width_px,
              "x", a.height_px, "x", a.frames);
  RefinerLayout layout{.frames = a.frames, .height = a.height_px / 16, .width = a.width_px / 16, .audio_len = 0,
                       .text_len = a.text_len};
  const RefinerPlan plan = make_refiner_plan(layout, arch, cfg.eval.window);
  const int64_t n = layout.tokens();

  const auto t_w = clock_t_::now();
  uint64_t weight_bytes = 0;
  const RefinerWeights w = random_refiner(arch, be, &weight_bytes);
  be.synchronize();
  const double weights_ms = ms_since(t_w);

  // Input rows: seeded values in the video and text columns (zeros elsewhere, as packed).
  Tensor x = Tensor::zeros({n, plan.c_pad}, DType::F32);
  {
    const int32_t* mod = plan.modality.data_as<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = mod[i] == 0 ? arch.video_in_channels : arch.text_in_channels;
      float* row = x.data_as<float>() + i * plan.c_pad;
      for (int64_t j = 0; j < c; ++j)
        row[j] = static_cast<float>(normal_sample(5, static_cast<uint64_t>(i * plan.c_pad + j), 0.0, 1.0));
    }
  }

  Refiner model(arch, w, be);
  auto t0 = clock_t_::now();
  model.load(plan, x);
  be.synchronize();
  const double load_ms = ms_since(t0);
  t0 = clock_t_::now();
  model.run();
  be.synchronize();
  const double first_ms = ms_since(t0);
  t0 = clock_t_::now();
  std::unique_ptr<StepGraph> graph = be.capture([&] { model.run(); });
  const double capture_ms = ms_since(t0);
  std::vector<double> fwd_ms;
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    be.synchronize();
    const auto s0 = clock_t_::now();
    graph->launch();
    be.synchronize();
    if (i >= a.warmup) fwd_ms.push_back(ms_since(s0));
  }
  std::map<std::string, double> regions;
#if defined(MAGI2_HAVE_CUDA)
  if (a.profile && be.device() == Device::CUDA) {
    cuda_profile_begin(be);
    model.run();
    regions = cuda_profile_end(be);
  }
#endif

  // The pipeline's own steps: refine_latents (what `magi2 generate` runs at
  // 1080p) on this model, eager, with the host work of a step around the two
  // CFG forwards (inputs split and uploaded, outputs unpacked, CFG and the
  // FlowUniPC update on the host). Its uncond branch has its own text length,
  // a second layout, as in the pipeline. Against forward_ms_median this shows
  // what the pipeline adds per step. The first step also plans the uncond
  // layout (workspace, attention pairs): reported, left out of the median.
  nlohmann::json pipe = nlohmann::json::object();
  if (a.pipeline_steps > 0) {
    graph.reset();  // the uncond layout may re-plan the workspace the graph recorded
    RefineRequest rq;
    const int64_t preview_t = (a.frames + 1) / 2;  // refine_latents resamples T -> 2T - 1 frames
    rq.preview_latent = Tensor::empty({1, arch.video_in_channels, preview_t, layout.height, layout.width}, DType::F32);
    for (int64_t i = 0; i < rq.preview_latent.numel(); ++i)
      rq.preview_latent.data_as<float>()[i] = static_cast<float>(i % 251) * 0.008f - 1.0f;
    rq.text_cond = Tensor::zeros({a.text_len, arch.text_in_channels}, DType::F32);
    rq.text_uncond = Tensor::zeros({a.text_uncond_len, arch.text_in_channels}, DType::F32);
    rq.width_px = a.width_px;
    rq.height_px = a.height_px;
    rq.num_steps = 1 + a.pipeline_steps;
    std::vector<double> step_ms;
    rq.on_progress = [&](int, int, double ms) {
      step_ms.push_back(ms);
      return true;
    };
    bool finite = true;
    try {
      refine_latents(model, cfg, rq);
    } catch (const Error&) {
      // Random weights may drive the latent non-finite (refine_latents' last
      // check): once every step ran, the timings stand.
      if (static_cast<int>(step_ms.size()) != rq.num_steps) throw;
      finite = false;
    }
    const std::vector<double> later(step_ms.begin() + 1, step_ms.end());
    pipe = {{"latent_frames", 2 * preview_t - 1},
            {"text_uncond_tokens", a.text_uncond_len},
            {"latent_finite", finite},
            {"step_ms", step_ms},
            {"step_ms_median", median(later)},
            {"host_and_eager_ms_per_step", median(later) - 2 * median(fwd_ms)}};
  }

  // FLOP of one forward (2 per multiply-add): the GEMMs from the shapes, the
  // attention over each q range's union of keys.
  const double d = arch.hidden_size, hq = arch.num_heads_q(), hk = arch.num_heads_kv(), hd = arch.head_dim;
  const double im = arch.intermediate(), nl = arch.num_layers, nd = static_cast<double>(n);
  std::map<std::pair<int32_t, int32_t>, double> keys;
  const int32_t* qr = plan.q_ranges.data_as<int32_t>();
  const int32_t* kr = plan.k_ranges.data_as<int32_t>();
  for (int64_t p = 0; p < plan.q_ranges.size(0); ++p) keys[{qr[2 * p], qr[2 * p + 1]}] += kr[2 * p + 1] - kr[2 * p];
  double qk = 0;
  for (const auto& [q, k] : keys) qk += static_cast<double>(q.second - q.first) * k;
  std::map<std::string, double> flops;
  flops["attn.proj"] = nl * 2 * nd * d * ((hq + 2 * hk) * hd + hq + hq * hd);
  flops["attn.core"] = nl * 4 * hq * hd * qk;
  flops["mlp"] = nl * 2 * nd * d * 3 * im;
  double total = 0;
  for (auto& [k, v] : flops) total += v;
  const double fwd = median(fwd_ms);
  nlohmann::json j = {{"stage", "refiner"},
                      {"size", {a.width_px, a.height_px, a.frames}},
                      {"latent", {layout.frames, layout.height, layout.width}},
                      {"tokens", n},
                      {"text_tokens", a.text_len},
                      {"pairs", plan.q_ranges.size(0)},
                      {"attended_fraction", qk / (nd * nd)},
                      {"layers", arch.num_layers},
                      {"weights_bytes", weight_bytes},
                      {"weights_generate_ms", weights_ms},
                      {"workspace_bytes", model.workspace_bytes()},
                      {"load_ms", load_ms},
                      {"first_forward_ms", first_ms},
                      {"capture_ms", capture_ms},
                      {"forward_ms", fwd_ms},
                      {"forward_ms_median", fwd},
                      {"step_ms_estimate", 2 * fwd},
                      {"forward_flop", total},
                      {"tflops", total / (fwd * 1e-3) / 1e12},
                      {"flop", flops}};
  if (!pipe.empty()) j["pipeline"] = pipe;
  nlohmann::json comp = nlohmann::json::object();
  for (auto& [name, ms] : regions) {
    const double f = flops.count(name) ? flops.at(name) : 0.0;
    comp[name] = {{"ms", ms}, {"tflops", f > 0 ? f / (ms * 1e-3) / 1e12 : 0.0}};
  }
  if (!regions.empty()) j["components_eager_ms"] = comp;
#if defined(MAGI2_HAVE_CUDA)
  if (be.device() == Device::CUDA) {
    const CudaMemoryStats m = cuda_memory_stats(be);
    j["memory"] = {{"peak_allocated_bytes", m.peak_in_use}, {"device_total_bytes", m.device_total}};
  }
#endif
  return j;
}

}  // namespace magi2::cli
