#include "engine/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/model_files.h"
#include "engine/text_conditioning.h"
#include "io/mmap_file.h"
#include "io/checkpoint.h"
#include "io/torch_zip.h"
#include "models/magi2_dit/offload.h"
#include "models/magi2_dit/weights.h"
#include "models/magi2_dit/workspace.h"
#include "models/magi2_refiner/weights.h"
#include "models/oobleck/config.h"
#include "models/oobleck/weights.h"
#include "models/qwen35/prompt.h"
#include "models/qwen35/text_config.h"
#include "models/qwen35/text_model.h"
#include "ops/fp8_attention_layout.h"
#include "ops/numerics.h"
#include "models/qwen35/text_weights.h"
#include "models/turbovae/chunk_plan.h"
#include "models/turbovae/decoder.h"
#include "models/turbovae/weights.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/generate.h"
#include "pipeline/packing.h"
#include "pipeline/refine.h"
#if defined(MAGI2_HAVE_CUDA)
#include "cuda/backend_cuda.h"
#endif

namespace magi2 {

namespace fs = std::filesystem;

namespace {

uint64_t numel_of(const Shape& s) {
  uint64_t n = 1;
  for (int64_t d : s) n *= static_cast<uint64_t>(d);
  return n;
}

// CUDA libraries' own device memory (cuBLASLt, cuDNN and CUTLASS handles and
// kernels): not allocated through our cache, so a formula.
constexpr uint64_t kCudaRuntimeReserve = uint64_t{512} << 20;
// The backend's cuBLASLt workspace (src/cuda/backend_cuda.cpp kGemmWorkspace).
constexpr uint64_t kCudaGemmWorkspace = uint64_t{32} << 20;
// The CUDA caching allocator rounds blocks of >= 1 MiB up to 2 MiB (src/cuda/allocator.cpp).
constexpr uint64_t kCudaRounding = uint64_t{2} << 20;
// Buffers of DitWorkspace (one) + DenoiseLoop (an upper bound on the rounding slack).
constexpr uint64_t kDitBuffers = 1 + 26;

// Backend scratch of one DiT forward of n tokens (formulas from the code that
// allocates it). CUDA: MoeExpertsRunner::plan (src/cuda/moe_grouped.cu), the
// cuDNN SDPA stats (attention_cudnn.cpp), the GEMM workspace, rounding. CPU:
// the fp32 K/V copies of attention (cpu/attention.cpp) or the fp32 copy of a
// linear's input (cpu/linear.cpp), whichever is larger. FP8 routed experts on
// CUDA (docs/fp8.md) add W8A16's dequantised bf16 banks (three for the fused
// kernel, two for the GEMM path), or W8A8's e4m3 rows and their scales and,
// only where the banks stream (--offload layerwise; resident banks are held
// K-major since the load, DitWeights::prepare_banks), its three transposed
// e4m3 banks (src/cuda/moe_w8a8.cu). The fused routed-expert kernel is
// assumed where it applies (the default; MAGI2_MOE_KERNEL=epilogue|reference
// are diagnostics and need the GEMM path's larger workspace). FP8 attention
// (--attention-compute fp8) adds its e4m3 Q, K, V^T and scales
// (fp8_attention_layout, the buffer src/cuda/attention_fp8.cu carves; V^T's
// tiles bounded with kAttnFp8Samples samples a call).
// The smallest routed-expert pass the memory advice names (--moe-max-rows):
// below it the passes get many and short.
constexpr int64_t kMinAdvisedMoeRows = 65536;
// The samples of one DiT attention call the FP8 attention's scratch is
// planned for (two CFG branches, each with its reference images).
constexpr int64_t kAttnFp8Samples = 16;

uint64_t dit_scratch(const DitArch& a, int64_t n, bool cuda, bool fp8, Fp8Compute compute, int64_t moe_max_rows,
                     bool attn_fp8, bool linear_fp8, bool layerwise) {
  const uint64_t h = a.num_heads_q(), hd = a.head_dim, d = a.hidden_size;
  if (!cuda) return std::max<uint64_t>(2 * n * h * hd * 4, n * std::max<uint64_t>(a.virtual_width(), a.dense_intermediate()) * 4);
  uint64_t moe = 0;
  if (!a.moe_layers.empty()) {
    const uint64_t mh = a.moe_num_heads, ne = a.moe_num_experts, k = a.moe_top_k;
    const uint64_t dh = a.moe_head_dim(), de = a.moe_expert_intermediate_size, nf = mh * ne;
    // One pass's workspace: a call over more rows runs in token passes (CudaOptions::moe_max_rows).
    const uint64_t tp = moe_pass_tokens(n, static_cast<int64_t>(mh * k), moe_max_rows);
    const uint64_t chunks = (tp * k + 255) / 256, rows = tp * mh * k;
    // Sort buffers and the rows' routing weights; then a fused kernel's tile
    // starts and bf16 y (the default kernel where its widths apply; W8A8's
    // always), or the GEMM path's gathered rows, W13 output and fp32 W2 output.
    const bool w8a8 = fp8 && compute == Fp8Compute::W8A8;
    const bool fused = moe_fused_expert_widths(static_cast<int64_t>(dh), static_cast<int64_t>(de)) || w8a8;
    moe = 4 * (nf * chunks + nf + nf + 1 + 2 * rows) + 4 * rows;
    moe += fused ? 4 * (nf + 1) + rows * dh * 2 : rows * dh * 2 + rows * 2 * de * 2 + rows * dh * 4;
    if (w8a8)
      moe += (layerwise ? 3 * nf * dh * de : 0) + rows * dh + rows * ((dh + kFp8ActGroup - 1) / kFp8ActGroup) * 4;
    else if (fp8)
      moe += (fused ? 3 : 2) * nf * dh * de * 2;
  }
  uint64_t attn = 0;
  if (attn_fp8)
    attn = static_cast<uint64_t>(
        fp8_attention_layout(n, static_cast<int64_t>(h), static_cast<int64_t>(hd), kAttnFp8Samples).bytes);
  // FP8 linears: the e4m3 activations and their 1 x 128 group scales of the widest input (the dense MLP's),
  // plus 64 KiB for the scratch's 256-byte rounding per row group and cuBLASLt's padded weight-scale copy
  // (cuda/linear.cpp; a few KB).
  const uint64_t lin_k = std::max<uint64_t>(d, a.dense_intermediate());
  const uint64_t lin =
      linear_fp8 ? n * lin_k + n * ((lin_k + kFp8ActGroup - 1) / kFp8ActGroup) * 4 + (uint64_t{64} << 10) : 0;
  // The mHC logits in the fused kernels' shared scratch, the larger of two paths: as one GEMM
  // (src/cuda/mhc_logits_gemm.cpp: the split weights of up to 3 weight groups, [3 * 72, 4D] bf16, and the
  // GEMM's fp32 output [n, 72]) and as the post + residual's pass (src/cuda/mhc_post_logits.cu: the same
  // weights as 16-byte units, the coefficients [n, 20] f32 and 4 parts' partial logits and sums of squares,
  // [4, n, 25] f32; MAGI2_MHC_POST_PARTS=8 needs 4 x 100 bytes a token more).
  const uint64_t vw = static_cast<uint64_t>(a.virtual_width());
  const uint64_t mhc = 3 * 72 * vw * 2 + std::max(n * 72 * 4, n * 20 * 4 + 4 * n * 25 * 4);
  return kCudaRuntimeReserve + kCudaGemmWorkspace + moe + attn + lin + mhc + n * h * 4 + kDitBuffers * kCudaRounding;
}

// Peak activations of the Qwen3.5 text model over L tokens (src/models/qwen35/
// text_model.cpp): the residual, norm and mix rows plus the largest of a
// linear-attention layer, a full-attention layer (with the CPU backend's fp32
// K/V copies) and the MLP.
uint64_t text_activations(const qwen35::TextConfig& c, int64_t len) {
  const uint64_t e = 2, l = len, d = c.hidden_size, vd = c.value_dim(), hv = c.linear_num_value_heads;
  const uint64_t h = c.num_attention_heads, hkv = c.num_key_value_heads, hd = c.head_dim;
  const uint64_t lin = e * l * (2 * static_cast<uint64_t>(c.conv_dim()) + 3 * vd + 2 * hv);
  const uint64_t full = e * l * (4 * h * hd + 3 * hkv * hd) + 2 * l * hkv * hd * 4;
  const uint64_t mlp = e * l * 2 * static_cast<uint64_t>(c.intermediate_size);
  return 3 * e * l * d + std::max({lin, full, mlp});
}

// The buffers of one refiner forward of n tokens (RefinerWorkspace in
// src/models/magi2_refiner/refiner.cpp, one per layout: the second branch's
// layout replaces the first's, and the caching allocator hands a block it
// cannot reuse back to the driver when a cudaMalloc fails).
uint64_t refiner_activations(const RefinerArch& a, int64_t tokens, int64_t c_pad) {
  const uint64_t n = static_cast<uint64_t>(tokens), d = a.hidden_size, hd = a.head_dim, hq = a.num_heads_q();
  const uint64_t hk = a.num_heads_kv(), im = a.intermediate(), c = static_cast<uint64_t>(c_pad);
  const uint64_t f32 = c + 9 + 6 * static_cast<uint64_t>(a.rope_bands()) + d + hq * hd + hk * hd + d + 64 + 64 +
                       (hq * hd == d ? 0 : d);  // x_p coords rope state qf kf branch_f out_p out [fin]
  const uint64_t bf16 = d + d + (hq + 2 * hk) * hd + hq + hq * hd + hk * hd + hk * hd + hq * hd + hq * hd + d +
                        2 * im + im;  // state_bf xn qkv g q k v o o_p branch u z
  return n * (4 * f32 + 2 * bf16 + 2 * 4);  // + the perm / inv i32 rows
}

std::string pct(uint64_t part, uint64_t whole) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return b;
}

}  // namespace

uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},           {"B", 1},          {"KiB", 0x1p10},   {"MiB", 0x1p20}, {"GiB", 0x1p30}, {"TiB", 0x1p40},
      {"KB", 1e3},       {"MB", 1e6},       {"GB", 1e9},       {"TB", 1e12},    {"K", 0x1p10},   {"M", 0x1p20},
      {"G", 0x1p30},     {"T", 0x1p40}};
  double scale = 0;
  for (const auto& [name, s] : kUnits)
    if (unit == name) scale = s;
  MAGI2_CHECK(used > 0 && scale > 0 && std::isfinite(v) && v >= 0 && v * scale <= 0x1p60, flag,
              " must be a byte count or a size such as 40GiB or 80GB, got '", text, "'");
  return static_cast<uint64_t>(std::llround(v * scale));
}

std::string format_bytes(uint64_t b) {
  char s[32];
  if (b >= (uint64_t{1} << 30))
    std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(b) / 0x1p30);
  else if (b >= (uint64_t{1} << 20))
    std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(b) / 0x1p20);
  else
    std::snprintf(s, sizeof s, "%.1f KiB", static_cast<double>(b) / 0x1p10);
  return s;
}

uint64_t default_memory_budget(const std::string& backend, std::string* source) {
  if (backend == "cuda") {
#if defined(MAGI2_HAVE_CUDA)
    size_t free = 0, total = 0;
    if (cuda_memory_info(0, &free, &total)) {
      if (source) *source = "free GPU memory";
      return free;
    }
#endif
    if (source) *source = "unknown (no GPU visible: give --max-device-memory)";
    return 0;
  }
  if (source) *source = "host RAM";
  return static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

const MemoryPlan::Phase* MemoryPlan::phase(const std::string& name) const {
  for (const Phase& p : phases)
    if (p.name == name) return &p;
  return nullptr;
}

bool MemoryPlan::Phase::holds(const std::string& stage) const {
  for (const std::string& r : resident)
    if (r == stage || r == stage + " (weights)") return true;
  return false;
}

std::string MemoryPlan::residency_summary() const {
  if (residency == Residency::Together && !refiner_swaps_dit && !codecs_alone)
    return "every loaded stage stays resident; the DiT stays loaded across samples";
  std::string out;
  auto part = [&](const char* s) { out += (out.empty() ? "" : "; ") + std::string(s); };
  if (residency == Residency::Sequential)
    part("sequential: the text encoder is freed before the DiT loads (both do not fit together)");
  if (refiner_swaps_dit)
    part("the DiT is freed before the refiner uploads and reloaded for the next sample (both do not fit together)");
  if (codecs_alone)
    part("the codecs upload for their phase after the DiT and the refiner are freed (they do not fit beside them)");
  if (!refiner_swaps_dit && !codecs_alone) part("the DiT stays loaded across samples");
  return out;
}

const StageMemory* MemoryPlan::stage(const std::string& name) const {
  for (const StageMemory& s : stages)
    if (s.name == name) return &s;
  return nullptr;
}

struct MemoryPlanner::State {
  EngineOptions opt;
  std::string backend, root;
  Magi2Config cfg;
  StageMemory dit;  // weights part (request independent)
  bool layerwise_asked = false;  // --offload layerwise
  bool layerwise = false;  // --offload layerwise with the DiT on CUDA (the CPU backend streams nothing)
  OffloadBytes lw;         // the layerwise layout of the DiT's tensors (for the plan and the advice)
  bool fp8 = false;  // routed experts in FP8 (their CUDA scratch depends on --fp8-compute)
  // text encoder
  bool te = false;
  std::string te_dir;
  qwen35::TextConfig te_cfg;
  uint64_t te_weights = 0;
  OffloadBytes te_lw;  // the layerwise layout of its bound tensors (--offload layerwise on CUDA)
  bool te_mapped = true;
  std::shared_ptr<const qwen35::Tokenizer> tok;
  // decoders and the image encoder (present when their folders are)
  bool turbo = false, sao = false, wan = false;
  TurboVaeConfig turbo_cfg;
  uint64_t turbo_weights = 0;
  SaoVaeConfig sao_cfg;
  uint64_t sao_weights = 0;
  uint64_t wan_weights = 0, wan_first_width = 0;

  // the 1080p refiner (read for the first 1080p request)
  RefinerConfig rf_cfg;
  uint64_t rf_weights = 0;

  // Components are read on first need, so a request that does not use one
  // never trips over it (and its loader reports a broken one, as without a plan).
  bool te_read = false, decoders_read = false, wan_read = false, rf_read = false;

  void read_refiner() {
    if (rf_read) return;
    rf_cfg = refiner_config_for_model(root, opt.config);
    Checkpoint::open(find_refiner_dir(root));  // headers only: a missing folder or a bad header fails here
    for (const auto& [name, spec] : RefinerWeights::specs(rf_cfg.arch))
      rf_weights += numel_of(spec.first) * dtype_size(spec.second);  // RefinerWeights::bind casts to these
    rf_read = true;
  }

  void read_text_encoder() {
    if (te_read || !te) return;
    te_dir = find_text_encoder_dir(root, opt.text_encoder);
    te_cfg = qwen35::TextConfig::from_file((fs::path(te_dir) / "config.json").string());
    // Bound layers: up to the feature layer hidden_states[-3] (TextEncoder::load).
    const int needed = te_cfg.num_hidden_layers - qwen35::kOfficialSkipLayer;
    std::vector<std::pair<int, uint64_t>> sizes;
    for (const qwen35::TextTensorSpec& t : qwen35::text_tensor_specs(te_cfg)) {
      const int layer = qwen35::text_layer_of(t.name);
      if (layer >= needed) continue;
      // bf16 as the official torch_dtype; the 1-D gains and DeltaNet scalars as
      // the f32 copies TextWeights::bind makes of them.
      const uint64_t bytes = numel_of(t.shape) * (t.shape.size() == 1 ? 4 : 2);
      te_weights += bytes;
      sizes.emplace_back(layer, bytes);
    }
    te_lw = offload_bytes_of(sizes);
    const Checkpoint tc = Checkpoint::open(te_dir);
    for (const std::string& n : tc.names())
      if (tc.entry(n).dtype != DType::BF16 && tc.entry(n).shape.size() >= 2) te_mapped = false;
    te_read = true;
  }

  void read_decoders() {
    if (decoders_read) return;
    const fs::path turbo_dir = fs::path(root) / "turbo_vae", sao_dir = fs::path(root) / "stable-audio-open-1.0";
    if (fs::is_directory(turbo_dir)) {
      turbo = true;
      turbo_cfg = TurboVaeConfig::from_json_file(turbo_vae_config_path(turbo_dir.string()));
      for (const TurboVaeTensorSpec& t : turbo_vae_tensor_specs(turbo_cfg)) turbo_weights += numel_of(t.shape) * 2;
    }
    if (fs::is_directory(sao_dir)) {
      sao = true;
      sao_cfg = SaoVaeConfig::load(sao_dir.string());
      for (const SaoTensorSpec& t : sao_vae_tensor_specs(sao_cfg))
        if (t.name.find(".decoder.") != std::string::npos) sao_weights += numel_of(t.shape) * 4;  // fp32
    }
    decoders_read = true;
  }

  void read_wan() {
    if (wan_read) return;
    const fs::path wan_pth = fs::path(root) / "vae" / "Wan2.2_VAE.pth";
    if (fs::is_regular_file(wan_pth)) {
      wan = true;
      for (const TorchTensorInfo& t : torch_checkpoint_tensor_infos(wan_pth.string())) {
        if (!t.name.starts_with("encoder.") && !t.name.starts_with("conv1.")) continue;
        wan_weights += numel_of(t.shape) * 4;  // fp32, as the official encoder
        if (t.name == "encoder.conv1.weight" && !t.shape.empty()) wan_first_width = static_cast<uint64_t>(t.shape[0]);
      }
    }
    wan_read = true;
  }

  int64_t tokens_of(const std::string& prompt, bool i2v, bool truncate, const std::string& what) {
    if (!tok) tok = qwen35::Tokenizer::load(te_dir);
    return static_cast<int64_t>(tokenize_prompt(*tok, prompt, i2v, truncate, what, false).encoding.size());
  }
};

MemoryPlanner::MemoryPlanner(const EngineOptions& o, const std::string& backend) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.opt = o;
  s.backend = backend;
  s.root = resolve_model(o.model, o.cache);
  const std::string why = folder_problem(s.root);  // /dev/zero "is a character device", not "missing"
  MAGI2_CHECK(why.empty(), "model folder '", s.root, "' ", why);
  // The engine's order of checks: a missing text encoder folder is named first.
  if (o.encodes_text) s.te_dir = find_text_encoder_dir(s.root, o.text_encoder);
  s.cfg = config_for_model(s.root, o.config);
  // DiT: the parameter dtypes of the official tensor list (DitWeights::bind
  // casts to them); zero-copy on the CPU when the stored dtype already matches.
  const std::string tdir = o.transformer.empty() ? find_transformer_dir(s.root) : o.transformer;
  const Checkpoint ck = Checkpoint::open(tdir);
  bool mapped = true;
  // FP8 routed experts (docs/fp8.md): stored as F8_E4M3, or quantised at load by --weights fp8-experts.
  const ExpertWeights want = expert_weights_from_name(o.weights, "--weights");
  bool stored_fp8 = false;
  for (const std::string& n : ck.names())
    if (is_routed_expert_weight(n) && ck.entry(n).dtype == DType::F8E4M3) stored_fp8 = true;
  const bool fp8 = want == ExpertWeights::FP8 || (want == ExpertWeights::Auto && stored_fp8);
  s.fp8 = fp8;
  const std::vector<DitTensorSpec> specs = dit_tensor_specs(s.cfg.arch, fp8 ? ExpertWeights::FP8 : ExpertWeights::BF16);
  for (const DitTensorSpec& t : specs) {
    s.dit.weights += numel_of(t.shape) * dtype_size(t.dtype);
    if (ck.contains(t.name) && ck.entry(t.name).dtype != t.dtype) mapped = false;
  }
  s.dit.name = "dit";
  s.dit.backend = backend;
  s.dit.pool = backend == "cuda" ? MemoryPool::Device : MemoryPool::Host;
  s.dit.weights_mapped = backend != "cuda" && mapped;
  // --offload layerwise (DitOffload): the layers in pinned host memory, two slots + the rest on the GPU.
  s.lw = offload_bytes(specs);
  s.layerwise_asked = offload_from_name(o.offload, "--offload") == Offload::Layerwise;
  s.layerwise = backend == "cuda" && s.layerwise_asked;
  if (s.layerwise) s.dit.weights = s.lw.device(), s.dit.pinned_host = s.lw.layers;
  s.te = o.encodes_text;
}

MemoryPlanner::~MemoryPlanner() = default;

uint64_t MemoryPlanner::text_encoder_weights() {
  s_->read_text_encoder();
  return s_->te ? s_->te_weights : 0;
}
uint64_t MemoryPlanner::dit_weights() const { return s_->dit.weights; }
uint64_t MemoryPlanner::refiner_weights() {
  s_->read_refiner();
  return s_->rf_weights;
}
uint64_t MemoryPlanner::dit_weights_layerwise() const {
  return s_->backend == "cuda" ? s_->lw.device() : s_->dit.weights;
}

MemoryPlan MemoryPlanner::plan(const GenerateParams& p, uint64_t budget, const std::string& budget_source,
                               bool text_encoder_kept) {
  State& s = *s_;
  const DitArch& a = s.cfg.arch;
  const bool cuda = s.backend == "cuda", i2v = !p.image.empty();
  MemoryPlan m;
  m.label = p.label;
  m.dit_backend = s.backend;
  m.fp8 = fp8_modes(s.opt, s.fp8);
  if (p.refine_from.empty()) m.problems = fp8_backend_problems(a, m.fp8, s.backend);  // refine runs no DiT
  m.width = p.pixel_width();
  m.height = p.pixel_height();
  m.seconds = p.seconds;
  m.steps = p.steps == -1 ? s.cfg.eval.num_inference_steps : p.steps;
  m.budget = budget;
  m.budget_source = budget_source;
  LatentShape ls = latent_shape_for_clip(p.seconds, m.width, m.height, s.cfg.eval.fps);
  ls.channels = a.video_in_channels;
  ls.audio_channels = a.audio_in_channels;

  // Token counts: the tokenizer alone (no weights), or the feature file's header.
  if (p.text_features.empty()) {
    MAGI2_CHECK(s.te, p.label, ": prompts need the text encoder, but the engine was made without it");
    s.read_text_encoder();
    m.prompt_tokens = s.tokens_of(p.prompt, i2v, p.truncate, p.label);
    m.negative_tokens = s.cfg.eval.use_negative_prompt
                            ? s.tokens_of(negative_prompt_or_default(p.negative_prompt), false, p.truncate,
                                          "negative prompt")
                            : 0;
  } else {
    const auto tf = SafetensorsFile::open(p.text_features);
    const auto rows = [&](const char* name) {
      const Shape& sh = tf->entry(name).shape;
      MAGI2_CHECK(sh.size() >= 2, "--text-features ", p.text_features, ": ", name, " is not [L, D]");
      return sh[sh.size() - 2];
    };
    m.prompt_tokens = rows("raw_txt_feat");
    m.negative_tokens = rows("raw_null_txt_feat");
  }
  PackingShapes shapes;
  shapes.latent = ls;
  shapes.text_channels = a.text_in_channels;
  shapes.text_len_cond = m.prompt_tokens;
  shapes.text_len_uncond = m.negative_tokens;
  if (i2v) shapes.ref_images.push_back({ls.height, ls.width});
  const PackingPlan pack = make_packing_plan(shapes);
  m.tokens = pack.total_tokens;

  StageMemory dit = s.dit;
  const bool attn_fp8 = fp8_from_compute_name(s.opt.attention_compute, "--attention-compute");
  const bool lin_fp8 = fp8_from_compute_name(s.opt.linear_compute, "--linear-compute");
  dit.activations = DitWorkspace::planned_bytes(a, pack.total_tokens, pack.width, lin_fp8) +
                    DenoiseLoop::planned_bytes(pack, m.steps, a.out_channels());
  dit.workspace = dit_scratch(a, pack.total_tokens, cuda, s.fp8,
                              fp8_compute_from_name(s.opt.fp8_compute, "--fp8-compute"), s.opt.cuda.moe_max_rows,
                              attn_fp8, lin_fp8, s.layerwise);
  dit.source = str_cat("weights: the official tensor list at its parameter dtypes",
                       dit.weights_mapped ? " (mmap'd views)" : "",
                       s.layerwise ? str_cat(" (--offload layerwise: non-layer tensors + 2 layer slots of ",
                                             format_bytes(s.lw.slot), " on the device, ",
                                             format_bytes(s.lw.layers), " of layers in pinned host memory)")
                                   : "",
                       "; activations: DitWorkspace + DenoiseLoop "
                       "buffers (exact); workspace: formula (",
                       cuda ? "CUDA libraries 512 MiB + GEMM 32 MiB + MoE plan + attention stats + allocator rounding"
                            : "the CPU attention's fp32 K/V copies",
                       cuda && attn_fp8 ? " + FP8 attention operands" : "",
                       cuda && lin_fp8 ? " + FP8 linear activations" : "", ")",
                       lin_fp8 ? "; --linear-compute fp8 counted at bf16 weight sizes (an upper bound)" : "");
  // --text-encoder-device auto puts the text encoder on the DiT's backend (its weights uploaded there).
  const bool te_gpu = cuda && s.opt.text_encoder_device == "auto";
  if (s.te && p.text_features.empty()) {
    // --offload layerwise streams its layers too when it runs on the GPU.
    const bool te_lw = te_gpu && s.layerwise_asked;
    StageMemory te{.name = "text_encoder", .backend = te_gpu ? "cuda" : "cpu",
                   .pool = te_gpu ? MemoryPool::Device : MemoryPool::Host,
                   .weights = te_lw ? s.te_lw.device() : s.te_weights, .pinned_host = te_lw ? s.te_lw.layers : 0,
                   .weights_mapped = !te_gpu && s.te_mapped};
    te.activations = text_activations(s.te_cfg, std::max(m.prompt_tokens, m.negative_tokens));
    te.source = str_cat("weights: the layers up to hidden_states[-3] in bf16 (gains f32)",
                        te_lw ? str_cat(" (--offload layerwise: embeddings + 2 layer slots of ", format_bytes(s.te_lw.slot),
                                        " on the device, ", format_bytes(s.te_lw.layers), " of layers in pinned host memory)")
                              : "",
                        "; activations: formula (one layer's buffers)");
    m.stages.push_back(te);
  }
  // --decoder-device auto puts the codecs on the DiT's backend (their weights uploaded there).
  const bool codec_gpu = cuda && s.opt.decoder_device == "auto";
  const char* codec_backend = codec_gpu ? "cuda" : "cpu";
  const MemoryPool codec_pool = codec_gpu ? MemoryPool::Device : MemoryPool::Host;
  if (i2v) s.read_wan();
  if (i2v && s.wan) {
    StageMemory w{.name = "wan22_encode", .backend = codec_backend, .pool = codec_pool, .weights = s.wan_weights};
    w.activations = 4 * s.wan_first_width * (16 * ls.height) * (16 * ls.width) * 4;
    w.source = "weights: the encoder tensors of the .pth (fp32); activations: formula (4 fp32 maps of the "
               "first stage at full resolution)";
    m.stages.push_back(w);
  }
  m.stages.push_back(dit);
  // The 1080p refiner: the preview latent resampled to 2T-1 frames at the
  // refiner size, one token per latent cell, plus the text tokens of the
  // larger CFG branch (pipeline/refine.cpp); decoded at that size.
  LatentShape decoded = ls;
  if (p.refines()) {
    s.read_refiner();
    const RefinerArch& ra = s.rf_cfg.arch;
    const RefinedLatentSize rs = refined_latent_size(s.rf_cfg.eval, ls.frames, p.refiner_width, p.refiner_height);
    decoded.frames = rs.frames;
    decoded.height = rs.height;
    decoded.width = rs.width;
    const int64_t n = decoded.frames * decoded.height * decoded.width + std::max(m.prompt_tokens, m.negative_tokens);
    const int64_t c_pad = std::max({ra.video_in_channels, ra.audio_in_channels, ra.text_in_channels});
    const bool rf_gpu = cuda && s.opt.refiner_device == "auto";
    StageMemory rf{.name = "refiner", .backend = rf_gpu ? "cuda" : "cpu",
                   .pool = rf_gpu ? MemoryPool::Device : MemoryPool::Host, .weights = s.rf_weights};
    m.refiner_tokens = n;
    rf.activations = refiner_activations(ra, n, c_pad);
    // Scratch: CUDA libraries, the GEMM workspace, the block-window pair plan
    // (an int4 tile + an int2 range per 64-row tile and window block, at most
    // 27 window blocks) and the rounding of its 23 buffers; the CPU's
    // attention keeps fp32 K/V copies, and its host packs the input twice.
    const uint64_t tiles = static_cast<uint64_t>(n) / 64 + 1;
    rf.workspace = rf_gpu ? kCudaRuntimeReserve + kCudaGemmWorkspace + tiles * 27 * 24 + 23 * kCudaRounding
                          : 2 * static_cast<uint64_t>(n) * ra.num_heads_kv() * ra.head_dim * 4 +
                                2 * static_cast<uint64_t>(n) * c_pad * 4;
    rf.source = str_cat("weights: the official refiner tensor list (bf16 matrices, f32 norms and adapters); "
                        "activations: RefinerWorkspace buffers at ", n, " tokens (exact); workspace: formula (",
                        rf_gpu ? "CUDA libraries 512 MiB + GEMM 32 MiB + the window pair plan + allocator rounding"
                               : "the CPU attention's fp32 K/V copies + the packed input twice",
                        ")");
    m.stages.push_back(rf);
  }
  const bool decode = p.decodes();
  if (decode) s.read_decoders();
  if (decode && s.turbo && s.sao) {
    const LatentShape& ls = decoded;  // the decoders take the refined latent at 1080p
    const TurboVaeConfig& tc = s.turbo_cfg;
    const TurboChunkPlan cp = plan_turbo_chunks(ls.frames, tc.first_chunk_size, tc.step_size,
                                                tc.temporal_compression_ratio);
    int64_t tmax = 1;
    for (const TurboChunk& c : cp.chunks) tmax = std::max(tmax, c.end - c.begin);
    // Widest map of one chunk call: walk the up blocks (widest first), growing
    // space and time where the config scales.
    const auto& widths = tc.decoder_block_out_channels;
    uint64_t t = tmax, h = ls.height, w = ls.width, widest = 0;
    for (size_t i = widths.size(); i-- > 0;) {
      widest = std::max<uint64_t>(widest, static_cast<uint64_t>(widths[i]) * t * h * w);
      if (tc.decoder_spatio_temporal_scaling[i]) {
        h *= 2, w *= 2;
        if (!tc.decoder_spatio_only[i]) t *= 2;
        widest = std::max<uint64_t>(widest, static_cast<uint64_t>(widths[i]) * t * h * w);
      }
    }
    const uint64_t frames = 4 * ls.frames - 3, px = 16 * ls.height * 16 * ls.width;
    StageMemory tv{.name = "turbovae_decode", .backend = codec_backend, .pool = codec_pool,
                   .weights = s.turbo_weights};
    tv.activations = 4 * widest * 2 + frames * px * 3 + frames * px * 3 * 4;
    tv.source = "weights: the decoder tensor list in bf16; activations: formula (4 bf16 maps of the widest stage "
                "of one temporal chunk + the f32 and u8 frames)";
    m.stages.push_back(tv);
    const OobleckCodecConfig& dc = s.sao_cfg.decoder;
    uint64_t len = ls.audio_frames, wmax = static_cast<uint64_t>(dc.width(dc.c_mults.size())) * len;
    for (size_t i = dc.c_mults.size(); i > 0; --i) {
      len *= static_cast<uint64_t>(dc.strides[i - 1]);
      wmax = std::max<uint64_t>(wmax, static_cast<uint64_t>(dc.width(i - 1)) * len);
    }
    StageMemory au{.name = "oobleck_decode", .backend = codec_backend, .pool = codec_pool, .weights = s.sao_weights};
    au.activations = 4 * wmax * 4 + 3 * len * 2 * 8;
    au.source = "weights: the decoder tensor list in fp32; activations: formula (4 f32 maps of the widest block + "
                "the FFT resample's complex buffers)";
    m.stages.push_back(au);
  }

  // Residency. Every stage resident together first; when that does not fit
  // the budget, the stages that share its pool are parted step by step,
  // cheapest first (Engine follows the phases: a stage a phase does not list
  // is freed on entering it): the text encoder from the DiT (Sequential: the
  // CLI encodes every prompt first, so it loads once), then the refiner from
  // the DiT (a DiT reload per 1080p sample), then the codecs from both (a DiT
  // reload per decoded sample).
  const StageMemory* te = m.stage("text_encoder");
  const StageMemory* wan = m.stage("wan22_encode");
  const StageMemory* tv = m.stage("turbovae_decode");
  const StageMemory* au = m.stage("oobleck_decode");
  const StageMemory* d = m.stage("dit");
  const StageMemory* rf = m.stage("refiner");
  const MemoryPool budget_pool = cuda ? MemoryPool::Device : MemoryPool::Host;
  auto build = [&](bool seq, bool swap, bool alone) {
    m.residency = seq ? Residency::Sequential : Residency::Together;
    m.refiner_swaps_dit = swap;
    m.codecs_alone = alone;
    m.phases.clear();
    m.peak_device = m.peak_host = 0;
    const bool te_kept = te && !seq && text_encoder_kept;
    auto add = [&](MemoryPlan::Phase& ph, const StageMemory* st, bool all) {
      if (!st) return;
      ph.resident.push_back(str_cat(st->name, all ? "" : " (weights)"));
      (st->pool == MemoryPool::Device ? ph.device : ph.host) += all ? st->total() : st->weights;
      ph.host += st->pinned_host;  // streamed layers stay pinned while the stage is loaded
    };
    auto codecs = [&](MemoryPlan::Phase& ph) {
      if (!alone) add(ph, wan, false), add(ph, tv, false), add(ph, au, false);
    };
    auto push = [&](MemoryPlan::Phase ph) {
      if (ph.device > m.peak_device) m.peak_device = ph.device, m.peak_device_phase = ph.name;
      if (ph.host > m.peak_host) m.peak_host = ph.host, m.peak_host_phase = ph.name;
      m.phases.push_back(std::move(ph));
    };
    if (te) {
      MemoryPlan::Phase ph{.name = "encode"};
      add(ph, te, true);
      if (!seq) add(ph, d, false), add(ph, rf, false);
      codecs(ph);
      push(ph);
    }
    if (wan) {
      MemoryPlan::Phase ph{.name = "image"};
      add(ph, wan, true);
      if (te_kept) add(ph, te, false);
      if (!alone) add(ph, tv, false), add(ph, au, false), add(ph, d, false);
      if (!alone && !swap) add(ph, rf, false);
      push(ph);
    }
    MemoryPlan::Phase dn{.name = "denoise"};
    add(dn, d, true);
    if (te_kept) add(dn, te, false);
    if (!swap) add(dn, rf, false);
    codecs(dn);
    push(dn);
    if (rf) {
      MemoryPlan::Phase ph{.name = "refine"};
      add(ph, rf, true);
      if (!swap) add(ph, d, false);
      if (te_kept) add(ph, te, false);
      codecs(ph);
      push(ph);
    }
    if (tv) {
      MemoryPlan::Phase ph{.name = "decode"};
      add(ph, tv, true), add(ph, au, true);
      // The DiT stays resident (its workspace is kept for the next request of this size).
      if (!alone && !(swap && rf)) add(ph, d, true);
      if (!alone) add(ph, rf, false);
      if (te_kept) add(ph, te, false);
      if (!alone) add(ph, wan, false);
      push(ph);
    }
  };
  const auto in_pool = [&](const StageMemory* st) { return st && st->pool == budget_pool; };
  const auto over = [&] { return budget > 0 && m.peak_in_budget_pool() > budget; };
  // Each step only where it parts stages of the budget's pool.
  bool seq = false, swap = false, alone = false;
  build(seq, swap, alone);
  if (over() && te && in_pool(te)) build(seq = true, swap, alone);
  if (over() && in_pool(rf) && in_pool(d)) build(seq, swap = true, alone);
  if (over() && (in_pool(tv) || in_pool(au) || in_pool(wan))) build(seq, swap, alone = true);
  m.fits = budget == 0 || m.peak_in_budget_pool() <= budget;
  if (!m.fits) {
    const std::string where = cuda ? "the GPU" : "the host";
    // The advice is about the DiT's phase when that one does not fit (every
    // other phase is then moot), else about the phase at the peak.
    const auto bytes_of = [&](const MemoryPlan::Phase& ph) { return cuda ? ph.device : ph.host; };
    const MemoryPlan::Phase* dn_phase = m.phase("denoise");
    const std::string peak = dn_phase && bytes_of(*dn_phase) > budget ? std::string("denoise")
                             : cuda                                   ? m.peak_device_phase
                                                                      : m.peak_host_phase;
    const uint64_t need = bytes_of(*m.phase(peak));
    // The stage the peak phase runs, and the advice for it.
    const StageMemory* run = peak == "refine" ? rf : peak == "decode" ? tv : peak == "image" ? wan
                             : peak == "encode" ? te : d;
    std::string would;
    if (run == d) {
      const bool weights_alone = d->weights > budget;
      // --offload layerwise is named only when the same phase fits with the DiT's weights streamed.
      const bool lw_fits = cuda && !s.layerwise && need - d->weights + s.lw.device() <= budget;
      // Smaller routed-expert passes (the same bytes, less workspace): the largest
      // pass size, halving from the current one, with which the phase fits.
      int64_t rows_fit = 0;
      if (cuda && !a.moe_layers.empty() && !weights_alone) {
        const Fp8Compute fc = fp8_compute_from_name(s.opt.fp8_compute, "--fp8-compute");
        for (int64_t r = s.opt.cuda.moe_max_rows / 2; r >= kMinAdvisedMoeRows && rows_fit == 0; r /= 2)
          if (need - d->workspace + dit_scratch(a, pack.total_tokens, cuda, s.fp8, fc, r, attn_fp8, lin_fp8, s.layerwise) <= budget)
            rows_fit = r;
      }
      const std::string rows = rows_fit > 0 ? str_cat("--moe-max-rows ", rows_fit, " (smaller routed-expert passes, "
                                                      "the same bytes), ")
                                            : "";
      would = weights_alone ? str_cat(lw_fits ? "--offload layerwise (DiT weights streamed from host memory) or " : "",
                                      "--weights fp8-experts (routed experts in FP8, ", pct(budget, d->weights),
                                      " of the bf16 weights fit)")
                            : str_cat(rows, "a smaller clip (--resolution 272p, fewer --seconds), ",
                                      lw_fits ? "--offload layerwise, " : "", "--weights fp8-experts");
    } else if (run == rf) {
      would = str_cat("a smaller refined clip (fewer --seconds, a smaller --refiner-width/--refiner-height)",
                      cuda && rf->pool == MemoryPool::Device ? ", --refiner-device cpu" : "");
    } else if (run == te) {
      const bool te_dev = cuda && te->pool == MemoryPool::Device;
      // --offload layerwise is named only when the encode phase fits with the text encoder's layers streamed.
      const bool lw_fits = te_dev && !s.layerwise_asked && need - te->weights + s.te_lw.device() <= budget;
      would = str_cat("a shorter prompt", lw_fits ? ", --offload layerwise (text encoder layers streamed from host memory)" : "",
                      te_dev ? ", --text-encoder-device cpu" : "");
    } else {
      would = str_cat("a smaller clip (fewer --seconds, a lower resolution)",
                      cuda && run->pool == MemoryPool::Device ? ", --decoder-device cpu" : "");
    }
    m.advice = str_cat(p.label, ": the memory plan needs ", format_bytes(need), " on ", where, " (phase ", peak, ": ",
                       run->name, " weights ", format_bytes(run->weights), " + activations ",
                       format_bytes(run->activations), " + workspace ", format_bytes(run->workspace),
                       run == d ? "" : str_cat(", DiT weights ", format_bytes(d->weights)), ", every stage that can "
                       "be freed freed) but ", format_bytes(budget), " are allowed (", budget_source, "); would fit: ",
                       would, ", or a larger --max-device-memory");
  }
  return m;
}

std::string MemoryPlan::text() const {
  std::string out = str_cat("memory plan for ", label, ": ", width, "x", height, " px, ", seconds, " s, ", steps,
                            " steps, ", tokens, " DiT tokens (prompt ", prompt_tokens, ", negative ", negative_tokens,
                            ")", refiner_tokens ? str_cat(", ", refiner_tokens, " refiner tokens") : std::string(),
                            "; DiT on ", dit_backend, " (", fp8.text(), ")\n");
  char line[256];
  std::snprintf(line, sizeof line, "  %-16s %-5s %-7s %12s %12s %12s %12s\n", "stage", "runs", "lives", "weights",
                "activations", "workspace", "total");
  out += line;
  for (const StageMemory& s : stages) {
    const std::string lives = s.pool == MemoryPool::Device ? "device" : (s.weights_mapped ? "host*" : "host");
    std::snprintf(line, sizeof line, "  %-16s %-5s %-7s %12s %12s %12s %12s\n", s.name.c_str(), s.backend.c_str(),
                  lives.c_str(), format_bytes(s.weights).c_str(), format_bytes(s.activations).c_str(),
                  format_bytes(s.workspace).c_str(), format_bytes(s.total()).c_str());
    out += line;
  }
  out += "  (host* = weights are zero-copy views of the mmap'd checkpoint, held in the page cache)\n";
  for (const StageMemory& s : stages)
    if (s.pinned_host)
      out += str_cat("  ", s.name, ": + ", format_bytes(s.pinned_host), " of streamed layer weights in pinned host "
                     "memory (--offload layerwise; counted in every phase's host bytes)\n");
  for (const StageMemory& s : stages) out += str_cat("  ", s.name, ": ", s.source, "\n");
  out += str_cat("  residency: ", residency_summary(), "\n");
  for (const Phase& ph : phases) {
    std::string names;
    for (const std::string& r : ph.resident) names += (names.empty() ? "" : ", ") + r;
    out += str_cat("  phase ", ph.name, ": ", dit_backend == "cuda" ? str_cat("device ", format_bytes(ph.device), ", ") : "",
                   "host ", format_bytes(ph.host), " [", names, "]\n");
  }
  if (dit_backend == "cuda") out += str_cat("  peak device: ", format_bytes(peak_device), " (", peak_device_phase, ")\n");
  out += str_cat("  peak host: ", format_bytes(peak_host), " (", peak_host_phase, ")\n");
  out += str_cat("  budget: ", budget ? format_bytes(budget) : std::string("none"), " (", budget_source, "): ",
                 budget == 0 ? "not checked" : (fits ? "fits" : "does NOT fit"), "\n");
  if (!fits) out += str_cat("  ", advice, "\n");
  for (const std::string& pr : problems) out += str_cat("  will fail: ", pr, "\n");
  return out;
}

nlohmann::json MemoryPlan::json() const {
  nlohmann::json st = nlohmann::json::array(), ph = nlohmann::json::array();
  for (const StageMemory& s : stages)
    st.push_back({{"stage", s.name},
                  {"backend", s.backend},
                  {"pool", s.pool == MemoryPool::Device ? "device" : "host"},
                  {"weights_mapped", s.weights_mapped},
                  {"weights_bytes", s.weights},
                  {"pinned_host_bytes", s.pinned_host},
                  {"activation_bytes", s.activations},
                  {"workspace_bytes", s.workspace},
                  {"total_bytes", s.total()},
                  {"source", s.source}});
  for (const Phase& p : phases)
    ph.push_back({{"phase", p.name}, {"resident", p.resident}, {"device_bytes", p.device}, {"host_bytes", p.host}});
  return {{"label", label},
          {"dit_backend", dit_backend},
          {"width", width},
          {"height", height},
          {"seconds", seconds},
          {"steps", steps},
          {"tokens", tokens},
          {"prompt_tokens", prompt_tokens},
          {"negative_tokens", negative_tokens},
          {"budget_bytes", budget},
          {"budget_source", budget_source},
          {"stages", st},
          {"residency", residency == Residency::Together ? "together" : "sequential"},
          {"refiner_tokens", refiner_tokens},
          {"refiner_swaps_dit", refiner_swaps_dit},
          {"codecs_alone", codecs_alone},
          {"residency_summary", residency_summary()},
          {"phases", ph},
          {"peak_device_bytes", peak_device},
          {"peak_device_phase", peak_device_phase},
          {"peak_host_bytes", peak_host},
          {"peak_host_phase", peak_host_phase},
          {"fits", fits},
          {"advice", advice},
          {"problems", problems}};
}

}  // namespace magi2
