// `magi2 bench`: the denoising step at the real widths with seeded random
// weights, graph-replayed, with a per-component breakdown, the FLOP rate and
// the bf16 GEMM ceiling measured in the same run (docs/perf.md records results).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench_load.h"
#include "bench_refiner.h"
#include "bench_stats.h"
#include "bench_decode.h"
#include "bench_text.h"
#include "choice_option.h"
#include "commands.h"
#include "weights_option.h"
#include "core/error.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "engine/fp8_modes.h"
#include "engine/memory_plan.h"
#include "engine/model_files.h"
#include "models/magi2_dit/dit.h"
#include "models/magi2_dit/offload.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/device_select.h"
#include "pipeline/generate.h"
#include "engine/tiny_model.h"
#include "ops/fp8_blocks.h"
#include "ops/numerics.h"
#if defined(MAGI2_HAVE_CUDA)
#include "cuda/backend_cuda.h"
#endif

namespace magi2::cli {
namespace {

struct BenchArgs {
  std::string config, device = "auto", json, resolutions = "272p,540p", weights = "bf16", cuda_attention = "auto";
  std::string stage = "step", model, write_random;
  std::string fp8_compute = "w8a16";  ///< --fp8-compute: how the FP8 experts compute (w8a16 | w8a8)
  std::string attention_compute = "bf16";  ///< --attention-compute: the DiT's attention in bf16 or fp8
  std::string linear_compute = "bf16";     ///< --linear-compute: the DiT's dense linears in bf16 or fp8 (W8A8)
  std::string offload = "none";       ///< --offload: none | layerwise (the layers streamed from pinned host memory)
  int64_t moe_max_rows = CudaOptions::kDefaultMoeMaxRows;  ///< --moe-max-rows: routed rows per grouped-GEMM pass
  int layers = 0, steps = 5, warmup = 1;
  int64_t text_cond = 300, text_uncond = 400;  // the token counts of shared/perf-anchor.md
  bool profile = true;
  std::string refiner_size = "1920x1088x63";  ///< --stage refiner: W x H pixels x T latent frames
  int refiner_pipeline_steps = 0;  ///< --stage refiner: timed steps of the pipeline's refine loop (0: none)
  int64_t text_tokens = 0;  ///< --stage text: prompt length (0: 300 and 2000)
  std::string decode_dir;   ///< --stage decode: random-weight codec folders ("": under the temp folder)
  bool full_model = false;  ///< every layer its own expert banks, made on the device (FP8 only)
  std::string max_device_memory;  ///< --stage step on CUDA: device bytes the bench may take ("" = all)
};

// The step's weights, made once per run and shared by every resolution.
struct BenchWeights {
  DitWeights w;
  std::unique_ptr<DitOffload> offload;  ///< --offload layerwise on CUDA: w is unused, the Dit streams from it
  nlohmann::json info;
};

using clock_t_ = std::chrono::steady_clock;
double ms_between(clock_t_::time_point a, clock_t_::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The first L layers of the release arch, keeping its layer kinds: mm at both
// ends, MoE in between (as 2..37 of 40).
DitArch cut_arch(DitArch a, int layers) {
  if (layers <= 0 || layers >= a.num_layers) return a;
  MAGI2_CHECK(layers >= 1, "--layers must be >= 1");
  a.num_layers = layers;
  a.mm_layers.clear();
  for (int l : {0, 1, layers - 2, layers - 1})
    if (l >= 0 && (a.mm_layers.empty() || a.mm_layers.back() < l)) a.mm_layers.push_back(l);
  a.moe_layers.clear();
  for (int l = 2; l < layers - 2; ++l) a.moe_layers.push_back(l);
  a.validate("bench (cut to --layers)");
  return a;
}

// FLOP of one step by component (2 per multiply-add), from the shapes.
std::map<std::string, double> step_flops(const DitArch& a, const PackingPlan& plan) {
  const double n = static_cast<double>(plan.total_tokens), d = a.hidden_size, h = a.num_heads_q(), hd = a.head_dim;
  double attn_sq = 0;
  const int32_t* cu = plan.cu_seqlens.data_as<int32_t>();
  for (int64_t b = 0; b + 1 < plan.cu_seqlens.numel(); ++b) attn_sq += double(cu[b + 1] - cu[b]) * (cu[b + 1] - cu[b]);
  const double nl = a.num_layers, nm = static_cast<double>(a.moe_layers.size()), nd = nl - nm;
  const double di = a.dense_intermediate(), mh = a.moe_num_heads, k = a.moe_top_k, dh = a.moe_head_dim();
  const double de = a.moe_expert_intermediate_size;
  const double sh = a.moe_shared_expert_intermediate_size + a.moe_modality_specific_expert_intermediate_size;
  std::map<std::string, double> f;
  f["attn.core"] = nl * 4 * h * hd * attn_sq;
  f["attn.proj"] = nl * 2 * n * d * (3 * d + h + d);
  f["dense_mlp"] = nd * 2 * n * d * 3 * di;
  f["moe.split_merge"] = nm * 2 * 2 * n * d * d;
  f["moe.router"] = nm * 2 * n * d * a.moe_num_experts;
  f["moe.routed_experts"] = nm * 2 * n * mh * k * 3 * dh * de;
  f["moe.shared_experts"] = nm * 2 * n * d * 3 * sh;
  f["mhc"] = nl * 2 * 2 * n * a.virtual_width() * 24;
  return f;
}

// bf16 GEMM rate of this backend at 8192^3 (512^3 on the CPU) (the ceiling every TFLOP/s is read against).
double gemm_ceiling_tflops(Backend& be) {
  const int64_t m = be.device() == Device::CPU ? 512 : 8192;
  Tensor x = be.alloc({m, m}, DType::BF16), w = be.alloc({m, m}, DType::BF16), y = be.alloc({m, m}, DType::BF16);
  be.zero(x);  // values do not change the schedule; zeros are fine for a ceiling of the library
  be.zero(w);
  std::vector<double> ms;
  for (int i = 0; i < 8; ++i) {
    be.synchronize();
    const auto t0 = clock_t_::now();
    be.linear({.x = x, .w = w, .y = y, .groups = Groups::single(m)});
    be.synchronize();
    if (i >= 2) ms.push_back(ms_between(t0, clock_t_::now()));
  }
  return 2.0 * m * m * m / (median(ms) * 1e-3) / 1e12;
}

// The FP8 modes of the step bench (its --weights is bf16 or fp8-experts, no auto).
Fp8Modes bench_fp8_modes(const BenchArgs& a) {
  return {a.weights == "fp8-experts", a.fp8_compute, a.attention_compute, a.linear_compute};
}

// Random weights. Default: all MoE layers share one expert bank (bf16 banks of
// 40 layers are 217 GB: they cannot all be resident on one GPU); FP8 quantises
// that bank on the host. --full-model (FP8): every MoE layer gets its own
// banks, drawn on the device (cuda_fill_random) so 110 GB never crosses PCIe.
BenchWeights make_bench_weights(const BenchArgs& a, const DitArch& arch, Backend& be) {
  const ExpertWeights fmt = expert_weights_from_name(a.weights, "--weights");
  const bool fp8 = fmt == ExpertWeights::FP8;
  MAGI2_CHECK(!a.full_model || fp8, "--full-model needs --weights fp8-experts (bf16 banks of every layer do not fit "
                                    "one GPU; the default shared bank gives the bf16 step)");
  MAGI2_CHECK(!a.full_model || be.device() == Device::CUDA, "--full-model needs the CUDA backend (--device cuda)");
  std::map<std::string, Tensor> shared;
  DitTensorSpec last_bank;  // the F8 bank whose _scale_inv spec comes next (visit order)
  const auto t_gen = clock_t_::now();
  DitWeights host = DitWeights::generate(
      arch,
      [&](const DitTensorSpec& s) -> Tensor {
        if (a.full_model && s.dtype == DType::F8E4M3) {
#if defined(MAGI2_HAVE_CUDA)
          Tensor t = be.alloc(s.shape, s.dtype);
          cuda_fill_random(be, t, std::hash<std::string>{}(s.name) ^ 7, 0.f);
          last_bank = s;
          return t;
#endif
        }
        if (a.full_model && s.name.ends_with("_scale_inv")) {
          // Codes e4m3(448 u), u uniform in [-1, 1): scale sqrt(3) std / 448 gives the recipe's spread.
          const DitTensorSpec ws{last_bank.name, last_bank.shape, DType::BF16};
          const float sc = static_cast<float>(random_dit_tensor_std(ws) * std::sqrt(3.0) / kE4m3Max);
          Tensor t = Tensor::empty(s.shape, DType::F32);
          std::fill(t.data_as<float>(), t.data_as<float>() + t.numel(), sc);
          return t;
        }
        for (const char* bank : {"moe_mlp.W_gate", "moe_mlp.W_up", "moe_mlp.W_down"}) {
          const bool is_bank = s.name.ends_with(bank), is_scale = s.name.ends_with(std::string(bank) + "_scale_inv");
          if (!is_bank && !is_scale) continue;
          auto it = shared.find(bank);
          if (it == shared.end()) {
            const DitTensorSpec bs{s.name, is_bank ? s.shape : Shape{}, DType::BF16};
            MAGI2_CHECK(is_bank, "bench: expert scales before their bank");
            Tensor b = random_dit_tensor(bs, 7, true);
            if (fp8) {
              Fp8Blocks q = quantize_fp8_blocks(b, s.name);
              shared.emplace(std::string(bank) + "_scale_inv", q.scale_inv);
              b = q.q;
            }
            it = shared.emplace(bank, b).first;
          }
          return is_scale ? shared.at(std::string(bank) + "_scale_inv") : it->second;
        }
        return random_dit_tensor(s, 7, true);
      },
      fmt == ExpertWeights::Auto ? ExpertWeights::BF16 : fmt);
  be.synchronize();
  const double gen_ms = ms_between(t_gen, clock_t_::now());
  size_t unique_bytes = 0, device_made = 0;
  {
    std::map<const void*, size_t> seen;
    host.for_each_tensor([&](const char*, Tensor& t) {
      if (!t.defined()) return;
      seen[t.data()] = t.nbytes();
      if (t.device() == be.device() && be.device() != Device::CPU) device_made += t.nbytes();
    });
    for (auto& [p, b] : seen) unique_bytes += b;
  }
  const auto t_up = clock_t_::now();
  BenchWeights out;
  host.fp8_compute = fp8_compute_from_name(a.fp8_compute, "--fp8-compute");
  host.fp8_attention = fp8_from_compute_name(a.attention_compute, "--attention-compute");
  if (fp8_from_compute_name(a.linear_compute, "--linear-compute")) host.quantize_linears();
  if (be.device() != Device::CPU && offload_from_name(a.offload, "--offload") == Offload::Layerwise)
    out.offload = std::make_unique<DitOffload>(host, be, copy_queue_for(be));
  else {
    out.w = be.device() == Device::CPU ? host : host.to_backend(be);
    host = DitWeights();  // --full-model: its device banks go as prepare_banks rewrites them
    out.w.prepare_banks(be);
  }
  be.synchronize();
  const double upload_ms = ms_between(t_up, clock_t_::now());
  out.info = bench_fp8_modes(a).json();  // weights, fp8_compute, attention_compute, linear_compute
  out.info.update({{"expert_banks", a.full_model ? "distinct FP8 banks per MoE layer, drawn on the device"
                               : fp8 ? "one FP8 bank (128x128 block scales) shared by every MoE layer"
                                     : "one bf16 bank shared by every MoE layer (bf16 banks of all layers do not fit)"},
              {"weights_unique_bytes", unique_bytes},
              {"weights_made_on_device_bytes", device_made},
              {"weights_generate_ms", gen_ms},
              {"weights_upload_ms", upload_ms},
              {"weights_upload_gb_per_s", (unique_bytes - device_made) / (upload_ms * 1e-3) / 1e9},
              {"offload", out.offload ? "layerwise" : "none"}});
  // Which layout the routed banks run in (DitWeights::prepare_banks): "k-major" when the W8A8 kernel reads
  // them as held, "checkpoint" otherwise (bf16, W8A16, the CPU, streamed layers).
  std::string layout = "checkpoint";
  for (const DitLayerWeights& L : out.w.layers)
    if (L.moe && L.bank_layout == ExpertBankLayout::KMajorW8a8) layout = "k-major";
  out.info["expert_bank_layout"] = layout;
  return out;
}

nlohmann::json bench_one(const BenchArgs& a, const DitArch& arch, const Magi2Config& cfg, const std::string& res,
                         Backend& be, const BenchWeights& bw) {
  MAGI2_ASSERT(res == "272p" || res == "540p");  // run_bench checked --resolutions
  const LatentShape ls = res == "272p" ? latent_shape_for_clip(10.0, 448, 256) : latent_shape_for_clip(10.0, 896, 512);
  const std::unique_ptr<Dit> dit_owner =
      bw.offload ? std::make_unique<Dit>(arch, *bw.offload, be) : std::make_unique<Dit>(arch, bw.w, be);
  Dit& dit = *dit_owner;

  PackingShapes sh;
  sh.latent = ls;
  sh.text_channels = arch.text_in_channels;
  sh.text_len_cond = a.text_cond;
  sh.text_len_uncond = a.text_uncond;
  const PackingPlan plan = make_packing_plan(sh);
  PackingConditioning cond;
  cond.text_cond = random_dit_tensor({"moe_mlp.gate", {a.text_cond, arch.text_in_channels}, DType::BF16}, 1, true);
  cond.text_uncond = random_dit_tensor({"moe_mlp.gate", {a.text_uncond, arch.text_in_channels}, DType::BF16}, 2, true);
  FlowUniPC sched;
  const int total_steps = 1 + a.warmup + a.steps + 1;
  sched.set_timesteps(total_steps, cfg.eval.shift);
  DenoiseSetup setup;
  setup.plan = &plan;
  setup.x_static = pack_static_tokens(plan, cond);
  setup.timesteps = sched.timesteps();
  setup.solver = sched.step_table();
  setup.latent = random_dit_tensor({"moe_mlp.gate", {1, ls.channels, ls.frames, ls.height, ls.width}, DType::F32}, 3, true);
  setup.audio_latent = random_dit_tensor({"moe_mlp.gate", {1, ls.audio_frames, 64}, DType::F32}, 4, true);
  DenoiseLoop loop(dit, setup);

  auto t0 = clock_t_::now();
  loop.step();
  be.synchronize();
  const double first_ms = ms_between(t0, clock_t_::now());
  t0 = clock_t_::now();
  loop.capture();
  const double capture_ms = ms_between(t0, clock_t_::now());
  std::vector<double> step_ms, cpu_ms;
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    be.synchronize();
    const auto s0 = clock_t_::now();
    loop.replay();
    const auto s1 = clock_t_::now();
    be.synchronize();
    const auto s2 = clock_t_::now();
    if (i >= a.warmup) {
      step_ms.push_back(ms_between(s0, s2));
      cpu_ms.push_back(ms_between(s0, s1));
    }
  }
  std::map<std::string, double> regions;
#if defined(MAGI2_HAVE_CUDA)
  if (a.profile && be.device() == Device::CUDA) {
    cuda_profile_begin(be);
    loop.step();
    regions = cuda_profile_end(be);
  }
#endif
  const auto flops = step_flops(arch, plan);
  double total_flop = 0;
  for (auto& [k, v] : flops) total_flop += v;
  const double step = median(step_ms);
  const double ceiling = gemm_ceiling_tflops(be);
  nlohmann::json j = {{"resolution", res},
                      {"tokens", plan.total_tokens},
                      {"samples", {plan.branches[0].length, plan.branches[1].length}},
                      {"layers", arch.num_layers},
                      {"moe_layers", arch.moe_layers.size()},
                      {"workspace_bytes", dit.workspace_bytes() + loop.bytes()},
                      {"first_step_ms", first_ms},
                      {"capture_ms", capture_ms},
                      {"step_ms_median", step},
                      {"step_ms", step_ms},
                      {"cpu_ms_per_replayed_step", median(cpu_ms)},
                      {"tflops", total_flop / (step * 1e-3) / 1e12},
                      {"gemm_ceiling_tflops", ceiling},
                      {"fraction_of_ceiling", total_flop / (step * 1e-3) / 1e12 / ceiling},
                      {"flop", flops}};
  double eager_sum = 0;
  nlohmann::json comp = nlohmann::json::object();
  for (auto& [name, ms] : regions) {
    eager_sum += ms;
    const double f = flops.count(name) ? flops.at(name) : 0.0;
    comp[name] = {{"ms", ms}, {"tflops", f > 0 ? f / (ms * 1e-3) / 1e12 : 0.0}};
  }
  if (!regions.empty()) {
    j["components_eager_ms"] = comp;
    j["eager_profiled_step_ms"] = eager_sum;
  }
  j.update(bw.info);
  if (bw.offload) {
    // PCIe traffic of a step (one forward) and the rate of the timed copies (the eager steps).
    const CopyQueueStats st = bw.offload->stats();
    j["pcie_bytes_per_step"] = bw.offload->bytes_per_forward();
    j["pcie_gb_per_s"] = st.gb_per_s();
    j["pcie_ms_per_step_at_that_rate"] = st.gb_per_s() > 0 ? bw.offload->bytes_per_forward() / (st.gb_per_s() * 1e6) : 0.0;
    j["offload_slot_bytes"] = bw.offload->slot_bytes();
    j["offload_pinned_host_bytes"] = bw.offload->pinned_bytes();
  }
#if defined(MAGI2_HAVE_CUDA)
  if (be.device() == Device::CUDA) {
    const CudaMemoryStats m = cuda_memory_stats(be);
    j["memory"] = {{"peak_allocated_bytes", m.peak_in_use}, {"allocated_bytes", m.in_use},
                   {"cached_bytes", m.cached}, {"device_used_bytes", m.device_used},
                   {"device_total_bytes", m.device_total}};
  }
#endif
  return j;
}

// --stage text: the Qwen3.5-27B text encoder forward (bench_text.h), CUDA only.
int run_text_bench(const BenchArgs& a) {
  MAGI2_CHECK(a.text_tokens >= 0, "--text-tokens must be >= 1, got ", a.text_tokens);
  auto be = make_backend_for(a.device, 0);
  TextBenchArgs t{.layers = a.layers, .steps = a.steps, .warmup = a.warmup, .profile = a.profile,
                  .offload = offload_from_name(a.offload, "--offload") == Offload::Layerwise};
  if (a.text_tokens > 0) t.tokens = {a.text_tokens};
  nlohmann::json j = bench_text(t, *be);
  j["backend"] = be->name();
  std::printf("bench text (Qwen3.5-27B widths, %d of %d feature layers, random weights %.2f GB):\n",
              j["layers"].get<int>(), j["feature_layers"].get<int>(), j["weights_bytes"].get<double>() / 1e9);
  for (const auto& r : j["runs"]) {
    std::printf("  %5lld tokens: forward %.2f ms median of %d (eager; first %.1f ms), %.3g FLOP, %.1f TFLOP/s; "
                "scaled to %d layers %.1f ms\n",
                r["tokens"].get<long long>(), r["forward_ms_median"].get<double>(), a.steps,
                r["first_forward_ms"].get<double>(), r["forward_flop"].get<double>(), r["tflops"].get<double>(),
                j["feature_layers"].get<int>(), r["feature_layers_ms_estimate"].get<double>());
    if (r.contains("components_eager_ms"))
      for (auto& [name, c] : r["components_eager_ms"].items())
        std::printf("    %-18s %10.2f ms  %7.1f TFLOP/s\n", name.c_str(), c["ms"].get<double>(),
                    c["tflops"].get<double>());
  }
  if (j.contains("memory"))
    std::printf("  device memory peak %.2f GB allocated\n", j["memory"]["peak_allocated_bytes"].get<double>() / 1e9);
  if (j.contains("pcie_bytes_per_forward"))
    std::printf("  --offload layerwise: %.2f GB over PCIe per forward at %.1f GB/s, 2 slots of %.2f GB, %.2f GB "
                "pinned\n",
                j["pcie_bytes_per_forward"].get<double>() / 1e9, j["pcie_gb_per_s"].get<double>(),
                j["offload_slot_bytes"].get<double>() / 1e9, j["offload_pinned_host_bytes"].get<double>() / 1e9);
  std::fflush(stdout);
  if (!a.json.empty()) write_file_atomic(a.json, j.dump(2) + "\n");
  return 0;
}

// One row of the --stage decode table, printed as soon as it is measured.
void print_decode_entry(const std::string& codec, const nlohmann::json& e) {
  const char* name = codec == "turbovae" ? "TurboVAE" : codec == "oobleck" ? "Oobleck" : "Wan2.2 encoder";
  const auto gb = [&](const char* k) { return e.contains(k) && e[k].is_number() ? e[k].get<double>() / 1e9 : 0.0; };
  std::printf("  %-15s %-10s %-20s %-20s %10.1f %12.1f %10.2f %10.2f\n", name,
              e["resolution"].get<std::string>().c_str(), e["input"].dump().c_str(), e["output"].dump().c_str(),
              e["model_ms"].get<double>(), e["pipeline_ms"].get<double>(), gb("weights_bytes"),
              gb("peak_allocated_bytes"));
  std::fflush(stdout);
}

// --stage decode: TurboVAE per resolution, Oobleck once, the Wan2.2 image
// encoder per preview size, at the release widths (bench_decode.h), CUDA only.
int run_decode_bench(const BenchArgs& a) {
  // Checked before the backend starts, so a typo costs no GPU start-up.
  const std::vector<std::string> res = parse_decode_resolutions(a.resolutions);
  auto be = make_backend_for(a.device, 0, CudaOptions{.attention = a.cuda_attention});
  const std::string dir =
      a.decode_dir.empty() ? (std::filesystem::temp_directory_path() / "magi2-bench-decode").string() : a.decode_dir;
  bool header = false;
  DecodeBenchArgs d{.dir = dir, .resolutions = res, .steps = a.steps, .warmup = a.warmup};
  d.on_entry = [&](const std::string& codec, const nlohmann::json& e) {
    if (!header) {
      std::printf("bench decode (release widths, random weights in %s; MAGI2_CONV_KERNEL picks conv3d's kernel; "
                  "median of %d after %d warm-up%s; ms of wall time with the host copies):\n",
                  dir.c_str(), a.steps, a.warmup, a.warmup == 1 ? "" : "s");
      std::printf("  %-15s %-10s %-20s %-20s %10s %12s %10s %10s\n", "codec", "resolution", "input", "output",
                  "model ms", "pipeline ms", "weights GB", "peak GB");
      header = true;
    }
    print_decode_entry(codec, e);
  };
  nlohmann::json j = bench_decode(d, *be);
  j["backend"] = be->name();
  std::printf("  model: TurboVAE bf16 frames, Oobleck 51.2 kHz waveform, Wan2.2 encoder on ready pixels; pipeline: "
              "the engine's call (uint8 frames = decode_video, audio + 44.1 kHz resample = decode_audio, PNG -> "
              "latent = reference_image)\n");
  std::fflush(stdout);
  if (!a.json.empty()) write_file_atomic(a.json, j.dump(2) + "\n");
  return 0;
}

int run_bench(const BenchArgs& a) {
  MAGI2_CHECK(a.steps >= 1 && a.steps <= 1000, "--steps must be in [1, 1000], got ", a.steps);
  MAGI2_CHECK(a.warmup >= 0 && a.warmup <= 100, "--warmup must be in [0, 100], got ", a.warmup);
  MAGI2_CHECK(a.layers >= 0 && a.layers <= 1000, "--layers must be in [0, 1000], got ", a.layers);
  if (!a.json.empty()) check_output_path(a.json, "--json");
  const Magi2Config cfg = a.config.empty() ? Magi2Config::release() : Magi2Config::from_file(a.config);
  MAGI2_CHECK(a.stage == "step" || a.stage == "load" || a.stage == "refiner" || a.stage == "text" ||
                  a.stage == "decode",
              "--stage must be step, load, refiner, text or decode, got '", a.stage, "'");
  if (a.stage == "text") return run_text_bench(a);
  if (a.stage == "decode") return run_decode_bench(a);
  if (a.stage == "refiner") {
    long long w = 0, h = 0, f = 0;
    char tail = 0;
    MAGI2_CHECK(std::sscanf(a.refiner_size.c_str(), "%lldx%lldx%lld%c", &w, &h, &f, &tail) == 3,
                "--refiner-size must be WxHxT (e.g. 1920x1088x63), got '", a.refiner_size, "'");
    auto be = make_backend_for(a.device, 0);
    nlohmann::json j = bench_refiner({.layers = a.layers, .text_len = a.text_cond, .steps = a.steps,
                                      .warmup = a.warmup, .profile = a.profile,
                                      .pipeline_steps = a.refiner_pipeline_steps, .text_uncond_len = a.text_uncond,
                                      .width_px = w, .height_px = h, .frames = f},
                                     *be);
    const double ceiling = gemm_ceiling_tflops(*be);
    j["gemm_ceiling_tflops"] = ceiling;
    j["fraction_of_ceiling"] = j["tflops"].get<double>() / ceiling;
    j["backend"] = be->name();
    std::printf("bench refiner %s: %lld tokens (%lld text), %d layers, %lld pairs (%.2f%% of dense): forward "
                "%.1f ms median of %d (graph replay), step (2 CFG forwards) %.1f ms, %.0f TFLOP/s = %.2f of the "
                "%.0f TFLOP/s bf16 GEMM ceiling; first forward %.1f ms, capture %.1f ms\n",
                a.refiner_size.c_str(), j["tokens"].get<long long>(), j["text_tokens"].get<long long>(),
                j["layers"].get<int>(),
                j["pairs"].get<long long>(), 100 * j["attended_fraction"].get<double>(),
                j["forward_ms_median"].get<double>(), a.steps, j["step_ms_estimate"].get<double>(),
                j["tflops"].get<double>(), j["fraction_of_ceiling"].get<double>(), ceiling,
                j["first_forward_ms"].get<double>(), j["capture_ms"].get<double>());
    std::printf("  memory: weights %.2f GB, activations %.2f GB%s\n", j["weights_bytes"].get<double>() / 1e9,
                j["workspace_bytes"].get<double>() / 1e9,
                j.contains("memory") ? str_cat(", device peak ", j["memory"]["peak_allocated_bytes"].get<double>() / 1e9,
                                               " GB allocated").c_str()
                                     : "");
    if (j.contains("components_eager_ms"))
      for (auto& [name, c] : j["components_eager_ms"].items())
        std::printf("  %-22s %10.2f ms  %7.1f TFLOP/s\n", name.c_str(), c["ms"].get<double>(),
                    c["tflops"].get<double>());
    if (j.contains("pipeline"))
      std::printf("  pipeline refine loop (eager, host work included; uncond %lld text tokens): step %.1f ms median "
                  "of %d (first %.1f ms), %.1f ms over two graph-replayed forwards\n",
                  j["pipeline"]["text_uncond_tokens"].get<long long>(), j["pipeline"]["step_ms_median"].get<double>(),
                  a.refiner_pipeline_steps, j["pipeline"]["step_ms"][0].get<double>(),
                  j["pipeline"]["host_and_eager_ms_per_step"].get<double>());
    std::fflush(stdout);
    if (!a.json.empty()) write_file_atomic(a.json, j.dump(2) + "\n");
    return 0;
  }
  if (a.stage == "load") {
    MAGI2_CHECK(!a.model.empty() || !a.write_random.empty(),
                "--stage load needs --model DIR (a DiT checkpoint) or --write-random DIR");
    const DitArch arch = cut_arch(cfg.arch, a.layers);
    if (!a.write_random.empty()) write_random_dit(a.write_random, arch);
    auto be = make_backend_for(a.device, 0, {.attention = a.cuda_attention});
    const nlohmann::json j = bench_load(a.model.empty() ? a.write_random : a.model, arch, *be, a.steps);
    std::printf("bench load: %.2f GB in %zu tensors from %zu shards (%d layers) -> %s: %.2f GB/s median of %d (%s)\n",
                j["bytes"].get<double>() / 1e9, j["tensors"].get<size_t>(), j["shards"].get<size_t>(),
                arch.num_layers, be->name(), j["gb_per_s_median"].get<double>(), a.steps,
                j["what"].get<std::string>().c_str());
    if (!a.json.empty()) write_file_atomic(a.json, j.dump(2) + "\n");
    return 0;
  }
  const std::vector<std::string> list = split_commas(a.resolutions);
  // Checked before the weights are made (minutes at 40 layers), so a typo costs nothing.
  for (const std::string& res : list)
    MAGI2_CHECK(res == "272p" || res == "540p", "--resolutions: unknown resolution '", res,
                "' for the step bench (272p or 540p; 1080p is the refiner's: --stage refiner, or --stage decode)");
  const uint64_t budget =
      a.max_device_memory.empty() ? 0 : parse_byte_size(a.max_device_memory, "--max-device-memory");
  auto be = make_backend_for(a.device, 0, {.attention = a.cuda_attention, .moe_max_rows = a.moe_max_rows});
  // A smaller GPU on this one: everything but the budget is held before the
  // weights are made, so the run fails with CUDA's out-of-memory if it needs more.
  std::shared_ptr<void> held;
  if (budget > 0) {
    MAGI2_CHECK(be->device() == Device::CUDA, "--max-device-memory needs the CUDA backend for the step bench");
#if defined(MAGI2_HAVE_CUDA)
    held = cuda_hold_all_but(budget);
#endif
  }
  const DitArch arch = cut_arch(cfg.arch, a.layers);
  // What the backend cannot run is refused before the weights are made.
  const Fp8Modes modes = bench_fp8_modes(a);
  const std::string backend = be->device() == Device::CUDA ? "cuda" : "cpu";
  const std::vector<std::string> problems = fp8_backend_problems(arch, modes, backend);
  MAGI2_CHECK(problems.empty(), problems.front());
  const BenchWeights weights = make_bench_weights(a, arch, *be);
  nlohmann::json out = {{"backend", be->name()}, {"config", cfg.source}, {"runs", nlohmann::json::array()}};
  if (budget > 0) {
    out["max_device_memory_bytes"] = budget;
    std::printf("bench: --max-device-memory %.2f GB (the rest of the GPU is held)\n", budget / 1e9);
  }
  for (const std::string& res : list) {
    const nlohmann::json j = bench_one(a, arch, cfg, res, *be, weights);
    out["runs"].push_back(j);
    std::printf("bench %s: %lld tokens, %d layers: step %.1f ms median of %d (graph replay; CPU %.3f ms/step), "
                "%.0f TFLOP/s = %.2f of the %.0f TFLOP/s bf16 GEMM ceiling; first step %.1f ms, capture %.1f ms, "
                "weights %.2f GB uploaded at %.1f GB/s; %s\n",
                res.c_str(), j["tokens"].get<long long>(), j["layers"].get<int>(), j["step_ms_median"].get<double>(),
                a.steps, j["cpu_ms_per_replayed_step"].get<double>(), j["tflops"].get<double>(),
                j["fraction_of_ceiling"].get<double>(), j["gemm_ceiling_tflops"].get<double>(),
                j["first_step_ms"].get<double>(), j["capture_ms"].get<double>(),
                j["weights_unique_bytes"].get<double>() / 1e9, j["weights_upload_gb_per_s"].get<double>(),
                modes.text().c_str());
    if (j.contains("memory"))
      std::printf("  weights %s, fp8 compute %s (%s; %s layout): %.2f GB; device memory peak %.2f GB allocated, "
                  "%.2f of %.2f GB used now\n",
                  j["weights"].get<std::string>().c_str(), j["fp8_compute"].get<std::string>().c_str(),
                  j["expert_banks"].get<std::string>().c_str(), j.value("expert_bank_layout", "checkpoint").c_str(),
                  j["weights_unique_bytes"].get<double>() / 1e9,
                  j["memory"]["peak_allocated_bytes"].get<double>() / 1e9,
                  j["memory"]["device_used_bytes"].get<double>() / 1e9,
                  j["memory"]["device_total_bytes"].get<double>() / 1e9);
    if (j.contains("pcie_bytes_per_step"))
      std::printf("  --offload layerwise: %.2f GB over PCIe per step at %.1f GB/s (%.1f ms of copies), 2 slots of "
                  "%.2f GB on the device, %.2f GB pinned on the host\n",
                  j["pcie_bytes_per_step"].get<double>() / 1e9, j["pcie_gb_per_s"].get<double>(),
                  j["pcie_ms_per_step_at_that_rate"].get<double>(), j["offload_slot_bytes"].get<double>() / 1e9,
                  j["offload_pinned_host_bytes"].get<double>() / 1e9);
    if (j.contains("components_eager_ms"))
      for (auto& [name, c] : j["components_eager_ms"].items())
        std::printf("  %-22s %10.2f ms  %7.1f TFLOP/s\n", name.c_str(), c["ms"].get<double>(),
                    c["tflops"].get<double>());
    std::fflush(stdout);
  }
  if (!a.json.empty()) write_file_atomic(a.json, out.dump(2) + "\n");
  return 0;
}

}  // namespace

Command bench_command() {
  return make_command<BenchArgs>([](CLI::App& app, BenchArgs& a) {
    CLI::App* s = app.add_subcommand("bench", "time the denoising step at the real widths (random weights)");
    s->add_option("--config", a.config, "config in the official JSON layout (default: built-in release)")
        ->envname("MAGI2_BENCH_CONFIG");
    s->add_option("--device", a.device, "auto, cuda or cpu")->envname("MAGI2_BENCH_DEVICE")->capture_default_str();
    add_cuda_attention_option(s, a.cuda_attention);
    s->add_option("--max-device-memory", a.max_device_memory,
                  "step bench on CUDA: device bytes the run may take (e.g. 40GiB; the rest of the GPU is held "
                  "first, so a run that needs more fails with out of memory); default: the whole GPU")
        ->envname("MAGI2_BENCH_MAX_DEVICE_MEMORY");
    add_moe_max_rows_option(s, a.moe_max_rows);
    s->add_option("--resolutions", a.resolutions, "comma-separated: 272p, 540p (--stage decode: also 1080p, the "
                  "refined latent of a 10 s clip)")
        ->envname("MAGI2_BENCH_RESOLUTIONS")
        ->capture_default_str();
    s->add_option("--layers", a.layers, "first N layers of the config (0: all), layer kinds kept")
        ->envname("MAGI2_BENCH_LAYERS");
    s->add_option("--steps", a.steps, "timed graph replays (median reported)")
        ->envname("MAGI2_BENCH_STEPS")
        ->capture_default_str();
    s->add_option("--warmup", a.warmup, "untimed replays first")->envname("MAGI2_BENCH_WARMUP")->capture_default_str();
    s->add_flag("!--no-profile", a.profile, "skip the instrumented per-component pass")
        ->envname("MAGI2_BENCH_PROFILE");
    s->add_option("--json", a.json, "write the results as JSON")->envname("MAGI2_BENCH_JSON");
    s->add_option("--stage", a.stage, "step (the denoising step), load (weights page cache -> device, GB/s), refiner (one "
                  "1080p refiner forward, release width, --layers cut, 300 text tokens) or text (the Qwen3.5-27B "
                  "text encoder at 300 and 2000 tokens, --layers cut; CUDA only) or decode (the codecs at the release "
                  "widths on a 10 s clip: TurboVAE at each of --resolutions, Stable Audio Open once, the Wan2.2 VAE "
                  "image encoder at each preview size; CUDA only)")
        ->envname("MAGI2_BENCH_STAGE")
        ->capture_default_str();
    s->add_option("--model", a.model, "--stage load: the model or DiT checkpoint folder to load (config: "
                  "--config, cut to --layers)")->envname("MAGI2_BENCH_MODEL");
    s->add_option("--write-random", a.write_random, "--stage load: first write a random-weight DiT folder "
                  "for the config (cut to --layers) here, then load it")->envname("MAGI2_BENCH_WRITE_RANDOM");
    s->add_option("--refiner-size", a.refiner_size,
                  "--stage refiner: refined width x height in pixels x latent frames (1080p of a 10 s clip)")
        ->envname("MAGI2_BENCH_REFINER_SIZE")
        ->capture_default_str();
    s->add_option("--pipeline-steps", a.refiner_pipeline_steps,
                  "--stage refiner: then time this many steps of the pipeline's own refine loop (eager, with its "
                  "host work; 300 cond, 400 uncond text tokens), after one untimed first step; 0: none")
        ->check(CLI::Range(0, 100))
        ->envname("MAGI2_BENCH_PIPELINE_STEPS");
    s->add_option("--decode-dir", a.decode_dir,
                  "--stage decode: folder for the random-weight codecs in the official layout (turbo_vae/, "
                  "stable-audio-open-1.0/, vae/Wan2.2_VAE.pth; what is missing is written once; a make-random "
                  "folder serves; default: the temp folder's magi2-bench-decode)")
        ->envname("MAGI2_BENCH_DECODE_DIR");
    s->add_option("--text-tokens", a.text_tokens, "--stage text: prompt length in tokens (default: 300 and 2000)")
        ->check(CLI::Range(int64_t{1}, int64_t{7000}))
        ->envname("MAGI2_BENCH_TEXT_TOKENS");
    add_choice_option(s, "--weights", a.weights,
                      "routed expert weights: bf16 or fp8-experts (128x128 blocks; --fp8-compute picks W8A16 or "
                      "W8A8)",
                      {"bf16", "fp8-experts"}, "MAGI2_BENCH_WEIGHTS");
    s->add_flag("--full-model", a.full_model,
                "every MoE layer its own FP8 expert banks, drawn on the GPU (the whole model resident; needs "
                "--weights fp8-experts and --device cuda)")
        ->envname("MAGI2_BENCH_FULL_MODEL");
    add_fp8_compute_option(s, a.fp8_compute);
    add_attention_compute_option(s, a.attention_compute);
    add_linear_compute_option(s, a.linear_compute);
    add_offload_option(s, a.offload);
    return s;
  }, run_bench);
}

}  // namespace magi2::cli
