#include "engine/engine.h"

#include <omp.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/finite.h"
#include "engine/memory_plan.h"
#include "engine/model_files.h"
#include "engine/text_conditioning.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "media/png.h"
#include "models/magi2_dit/dit.h"
#include "models/magi2_dit/offload.h"
#include "models/magi2_refiner/refiner.h"
#include "models/qwen35/tok_unicode.h"
#include "models/wan22_vae/encoder.h"
#include "models/wan22_vae/weights.h"
#include "pipeline/device_select.h"
#include "pipeline/decode.h"
#include "pipeline/generate.h"
#include "pipeline/refine.h"
#include "pipeline/reference_image.h"

namespace magi2 {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

Tensor need(const SafetensorsFile& f, const std::string& name, const char* flag) {
  if (!f.contains(name)) throw Error(str_cat(flag, " file '", f.path(), "' has no tensor '", name, "'"));
  return f.tensor(name);
}


// The middle latent frame [1, C, 1, h, w] of a [1, C, T, h, w] f32 latent.
Tensor middle_frame(const Tensor& latent) {
  const int64_t c = latent.size(1), t = latent.size(2), hw = latent.size(3) * latent.size(4);
  Tensor out = Tensor::empty({1, c, 1, latent.size(3), latent.size(4)}, DType::F32);
  const float* src = latent.data_as<float>() + (t / 2) * hw;
  float* dst = out.data_as<float>();
  for (int64_t ch = 0; ch < c; ++ch) std::memcpy(dst + ch * hw, src + ch * t * hw, hw * sizeof(float));
  return out;
}

// The prompt-enhancement request of a prepared request (its prompt as given).
pe::EnhanceRequest pe_request_of(const EngineOptions& o, const PreparedRequest& r) {
  pe::EnhanceRequest q = o.prompt_enhancement_request;
  q.prompt = r.prompt_before_enhancement;
  q.image = r.params.image;
  return q;
}

// The prompt file --save-prompt writes: the text verbatim, or for a .json
// path a one-sample --samples file that replays it exactly (--prompt-file
// strips surrounding whitespace, as the official reader, and the enhanced
// Markdown ends in a newline).
std::string saved_prompt(const GenerateParams& p) {
  if (!p.save_prompt_path.ends_with(".json")) return p.prompt;
  nlohmann::json sample = {{"prompt", p.prompt}};
  if (!p.image.empty()) sample["image"] = p.image;
  return nlohmann::json::array({sample}).dump(1) + "\n";
}

}  // namespace

// Distinct negative prompts whose features are kept.
constexpr size_t kMaxCachedNegatives = 8;

struct Engine::State {
  EngineOptions config;
  Clock::time_point created = Clock::now();
  bool first_run = true;
  LoadedDit model;
  std::unique_ptr<Backend> be;      // the CPU reference: text encoder, codecs, refiner unless their --*-device auto
  std::unique_ptr<Backend> dit_be;  // EngineOptions::device: the DiT and the denoising loop
  DitWeights dit_weights;           // on dit_be's device (uploaded once)
  std::unique_ptr<DitOffload> offload;  // --offload layerwise on CUDA: pinned layers, two device slots
  std::unique_ptr<Dit> dit;
  double load_ms = 0;
  // Loaded on first need:
  std::unique_ptr<qwen35::TextEncoder> enc;
  std::string te_dir;
  double text_ms = 0;  // text encoder load + first negative prompt
  std::map<std::pair<std::string, bool>, Tensor> uncond;  // (negative prompt, truncate) -> features
  std::optional<ClipDecoders> decoders;
  std::unique_ptr<Wan22EncoderWeights> wan_w;
  std::unique_ptr<Wan22Encoder> wan;
  // The 1080p refiner (EngineOptions::refiner_device: "auto", the DiT's
  // backend, or "cpu"): bound to the mmap'd checkpoint in prepare (names,
  // shapes and dtypes checked: a bad checkpoint costs no step), uploaded and
  // made when the refine phase comes, freed when a phase of the plan does not
  // list it (the binding stays, so a reload reads no header again).
  struct RefinerModel {
    RefinerConfig config;
    Checkpoint ckpt;
    RefinerWeights host;    // views of ckpt
    RefinerWeights device;  // on a GPU backend: the uploaded copy
    std::unique_ptr<Refiner> model;
  };
  std::unique_ptr<RefinerModel> refiner;
  double refiner_load_ms = 0;
  bool decoders_checked = false;  // ClipDecoders::load succeeded once (on some backend)

  // The TurboVAE / Stable Audio Open decoders' and the Wan2.2 encoder's backend
  // (EngineOptions::decoder_device): the CPU reference, or the DiT's with "auto".
  Backend& codec_backend() { return config.decoder_device == "cpu" ? *be : *dit_be; }
  Backend& refiner_backend() { return config.refiner_device == "cpu" ? *be : *dit_be; }

  void bind_refiner() {
    if (refiner) return;
    auto r = std::make_unique<RefinerModel>();
    r->config = refiner_config_for_model(model.root, config.config);
    r->ckpt = Checkpoint::open(find_refiner_dir(model.root));
    r->host = RefinerWeights::bind(r->ckpt, r->config.arch);
    MAGI2_CHECK(r->config.arch.text_in_channels == model.config.arch.text_in_channels, "refiner config ",
                r->config.source, ": text_in_channels ", r->config.arch.text_in_channels, " differs from the DiT's ",
                model.config.arch.text_in_channels);
    refiner = std::move(r);
  }

  void load_refiner() {
    bind_refiner();
    if (refiner->model) return;
    const auto t = Clock::now();
    Backend& rbe = refiner_backend();
    RefinerModel& r = *refiner;
    if (rbe.device() != Device::CPU) {
      std::function<void(size_t, size_t)> progress;
      if (on_load) progress = [this](size_t done, size_t total) { on_load("refiner", done, total); };
      r.device = r.host.to_backend(r.config.arch, rbe, progress);
    }
    r.model = std::make_unique<Refiner>(r.config.arch, rbe.device() != Device::CPU ? r.device : r.host, rbe);
    refiner_load_ms += ms_since(t);
    note("refiner", true, planner->refiner_weights(), ms_since(t));
  }

  void free_refiner() {
    if (!refiner || !refiner->model) return;
    const auto t = Clock::now();
    refiner->model.reset();
    refiner->device = RefinerWeights();
    note("refiner", false, planner->refiner_weights(), ms_since(t));
  }

  void load_decoders(const MemoryPlan& m, double* ms) {
    if (decoders) return;
    const auto t = Clock::now();
    decoders.emplace(ClipDecoders::load(model.root, codec_backend()));
    decoders_checked = true;
    *ms += ms_since(t);
    note("decoders", true, codec_weights(m), ms_since(t));
  }

  void free_decoders(const MemoryPlan& m) {
    if (!decoders) return;
    const auto t = Clock::now();
    decoders.reset();
    note("decoders", false, codec_weights(m), ms_since(t));
  }

  static uint64_t codec_weights(const MemoryPlan& m) {
    const StageMemory* tv = m.stage("turbovae_decode");
    const StageMemory* au = m.stage("oobleck_decode");
    return (tv ? tv->weights : 0) + (au ? au->weights : 0);
  }

  void load_wan(const MemoryPlan& m) {
    if (wan) return;
    const auto t = Clock::now();
    wan = std::make_unique<Wan22Encoder>(*wan_w, codec_backend());
    const StageMemory* w = m.stage("wan22_encode");
    note("wan22_encoder", true, w ? w->weights : 0, ms_since(t));
  }

  void free_wan(const MemoryPlan& m) {
    if (!wan) return;
    const auto t = Clock::now();
    wan.reset();  // the host weights (wan_w) stay: a reload reads no file
    const StageMemory* w = m.stage("wan22_encode");
    note("wan22_encoder", false, w ? w->weights : 0, ms_since(t));
  }

  // Entering `phase` of plan `m`: frees every loaded stage the phase does not
  // list (MemoryPlan::Phase::resident). A stage the request does not use at
  // all (a refiner kept from an earlier 1080p request) is kept unless the plan
  // parts stages, as its bytes are then not counted. The text encoder follows
  // Residency (prepare, run).
  void follow(const MemoryPlan& m, const char* phase) {
    const MemoryPlan::Phase* ph = m.phase(phase);
    if (!ph) return;
    const bool parted = m.residency == Residency::Sequential || m.refiner_swaps_dit || m.codecs_alone;
    auto gone = [&](const char* stage) { return !ph->holds(stage) && (m.stage(stage) || parted); };
    if (gone("dit")) free_dit();
    if (gone("refiner")) free_refiner();
    if (gone("turbovae_decode")) free_decoders(m);
    if (gone("wan22_encode")) free_wan(m);
  }

  // Memory: the planner checks every request against the budget; residency
  // says whether the text encoder and the DiT may be held together.
  std::unique_ptr<MemoryPlanner> planner;
  uint64_t budget = 0;
  std::string budget_source;
  Residency residency = Residency::Together;
  std::vector<ResidencyEvent> log;
  LoadProgress on_load;

  void note(const char* stage, bool loaded, uint64_t bytes, double ms) { log.push_back({stage, loaded, bytes, ms}); }

  // Binds the DiT checkpoint (zero-copy views) and, on a GPU, uploads it once.
  void load_dit() {
    if (dit) return;
    const auto t = Clock::now();
    if (!model.weights.layers.size()) {
      model.ckpt = Checkpoint::open(model.transformer_dir);
      model.weights = bind_dit(model.ckpt, model.config, expert_weights_from_name(config.weights, "--weights"));
    }
    model.weights.router_bias_from_ema = router_bias_from_ema(config.router_bias, "--router-bias");
    model.weights.fp8_compute = fp8_compute_from_name(config.fp8_compute, "--fp8-compute");
    model.weights.fp8_attention = fp8_from_compute_name(config.attention_compute, "--attention-compute");
    if (fp8_from_compute_name(config.linear_compute, "--linear-compute")) model.weights.quantize_linears();
    // On a GPU the weights are uploaded once; the mmap'd host views stay only
    // for the CPU backend.
    std::function<void(size_t, size_t)> progress;
    if (on_load) progress = [this](size_t done, size_t total) { on_load("dit", done, total); };
    // --offload layerwise on a GPU: the layers go to pinned host memory and
    // stream per forward; on the CPU backend there is nothing to stream.
    if (dit_be->device() == Device::CPU) {
      dit_weights = model.weights;
      dit = std::make_unique<Dit>(model.config.arch, dit_weights, *dit_be);
    } else if (offload_from_name(config.offload, "--offload") == Offload::Layerwise) {
      offload = std::make_unique<DitOffload>(model.weights, *dit_be, copy_queue_for(*dit_be), progress);
      model.weights = DitWeights(), model.ckpt = Checkpoint();
      dit = std::make_unique<Dit>(model.config.arch, *offload, *dit_be);
    } else {
      dit_weights = model.weights.to_backend(*dit_be, progress);
      model.weights = DitWeights(), model.ckpt = Checkpoint();
      dit_weights.prepare_banks(*dit_be);  // W8A8 on CUDA: the banks K-major, once
      dit = std::make_unique<Dit>(model.config.arch, dit_weights, *dit_be);
    }
    note("dit", true, planner->dit_weights(), ms_since(t));
  }

  void free_dit() {
    if (!dit) return;
    const auto t = Clock::now();
    dit.reset();
    offload.reset();
    dit_weights = DitWeights();
    model.weights = DitWeights();
    model.ckpt = Checkpoint();
    note("dit", false, planner->dit_weights(), ms_since(t));
  }

  // --offload layerwise with the text encoder on the GPU: its streaming
  // figures, kept past a sequential residency's release for the metrics.
  nlohmann::json text_stream;
  void note_text_stream() {
    LayerOffload* te = enc ? enc->offload() : nullptr;
    if (!te) return;
    const CopyQueueStats st = te->stats();
    text_stream = {{"pcie_bytes_per_forward", te->bytes_per_forward()}, {"pcie_gb_per_s", st.gb_per_s()},
                   {"slot_bytes", te->slot_bytes()}, {"pinned_host_bytes", te->pinned_bytes()}};
  }

  void free_text_encoder() {
    if (!enc) return;
    const auto t = Clock::now();
    note_text_stream();
    enc.reset();
    note("text_encoder", false, planner->text_encoder_weights(), ms_since(t));
  }

  // OpenMP's thread count is per calling thread, and the CPU backend sets it
  // only on the thread that made it: a server's worker thread would run with
  // every core (and spin at barriers on a busy machine) without this.
  void bind_threads() const {
    if (config.threads > 0) omp_set_num_threads(config.threads);
  }

  void load_text_encoder() {
    if (enc) return;
    if (residency == Residency::Sequential) free_dit();  // both do not fit the budget together
    const auto t = Clock::now();
    if (te_dir.empty()) te_dir = find_text_encoder_dir(model.root, config.text_encoder);
    // --offload layerwise streams the text encoder's layers too, when it runs on the GPU.
    Backend& te_be = config.text_encoder_device == "cpu" ? *be : *dit_be;
    std::unique_ptr<CopyQueue> stream;
    if (te_be.device() != Device::CPU && offload_from_name(config.offload, "--offload") == Offload::Layerwise)
      stream = copy_queue_for(te_be);
    std::function<void(size_t, size_t)> progress;
    if (on_load) progress = [this](size_t done, size_t total) { on_load("text_encoder", done, total); };
    enc = qwen35::TextEncoder::load(te_dir, te_be, DType::BF16, qwen35::kOfficialSkipLayer, std::move(stream),
                                    progress);
    MAGI2_CHECK(enc->config().hidden_size == model.config.arch.text_in_channels, "text encoder '", te_dir,
                "' gives features of width ", enc->config().hidden_size,
                " but the DiT takes text_in_channels = ", model.config.arch.text_in_channels);
    text_ms += ms_since(t);
    note("text_encoder", true, planner->text_encoder_weights(), ms_since(t));
  }

  // Unconditional branch (official get_null_feature): the negative prompt's
  // features when use_negative_prompt, else an empty feature.
  Tensor uncond_for(const std::string& negative, bool truncate) {
    const Magi2Config& cfg = model.config;
    if (!cfg.eval.use_negative_prompt) return Tensor::zeros({0, cfg.arch.text_in_channels}, DType::BF16);
    const auto key = std::make_pair(negative, truncate);
    if (auto it = uncond.find(key); it != uncond.end()) return it->second;
    load_text_encoder();
    const auto t = Clock::now();
    Tensor f = encode_prompt(*enc, negative_prompt_or_default(negative), false, truncate, "negative prompt").features;
    if (uncond.empty()) text_ms += ms_since(t);
    if (uncond.size() >= kMaxCachedNegatives) uncond.clear();  // bounded for long-running servers
    return uncond.emplace(key, f).first->second;
  }
};

Engine::Engine(const EngineOptions& config, LoadProgress on_load) : s_(std::make_unique<State>()) {
  validate(config);
  s_->config = config;
  s_->on_load = std::move(on_load);
  const std::string root = resolve_model(config.model, config.cache);
  const std::string why = folder_problem(root);  // /dev/zero "is a character device", not "missing"
  MAGI2_CHECK(why.empty(), "model folder '", root, "' ", why);
  if (config.encodes_text) s_->te_dir = find_text_encoder_dir(root, config.text_encoder);
  // Binds: a bad checkpoint fails here.
  s_->model = load_dit(root, config.transformer, config.config, expert_weights_from_name(config.weights, "--weights"));
  s_->be = make_cpu_backend(config.threads);
  s_->dit_be = make_backend_for(config.device, config.threads, config.cuda);
  EngineOptions at_root = config;
  at_root.model = root;
  const std::string backend = s_->dit_be->device() == Device::CPU ? "cpu" : "cuda";
  s_->planner = std::make_unique<MemoryPlanner>(at_root, backend);
  s_->budget = config.max_device_memory;
  s_->budget_source = "--max-device-memory";
  if (s_->budget == 0) s_->budget = default_memory_budget(backend, &s_->budget_source);
  const uint64_t dit_w = s_->planner->dit_weights();
  // --offload layerwise is named only when its device part (resident tensors + 2 layer slots) fits.
  const bool lw_fits = s_->planner->dit_weights_layerwise() < dit_w && s_->planner->dit_weights_layerwise() <= s_->budget;
  MAGI2_CHECK(s_->budget == 0 || dit_w <= s_->budget, "the DiT's weights (", format_bytes(dit_w),
              ") exceed the ", format_bytes(s_->budget), " allowed on ", backend == "cuda" ? "the GPU" : "the host",
              " (", s_->budget_source, "); would fit: ",
              lw_fits ? "--offload layerwise (DiT weights streamed from host memory), " : "",
              "--weights fp8-experts, or a larger --max-device-memory");
  s_->load_dit();
  s_->load_ms = ms_since(s_->created);
}

Engine::~Engine() = default;

const Magi2Config& Engine::model_config() const { return s_->model.config; }
const std::string& Engine::model_root() const { return s_->model.root; }
const std::string& Engine::transformer_dir() const { return s_->model.transformer_dir; }

void Engine::release_text_encoder() { s_->free_text_encoder(); }

Residency Engine::residency() const { return s_->residency; }
uint64_t Engine::memory_budget() const { return s_->budget; }
const std::vector<ResidencyEvent>& Engine::residency_log() const { return s_->log; }

PreparedRequest Engine::prepare(const GenerateParams& p) {
  validate(p);
  State& s = *s_;
  s.bind_threads();
  const Magi2Config& cfg = s.model.config;
  PreparedRequest r;
  r.params = p;
  r.latent = latent_shape_for_clip(p.seconds, p.pixel_width(), p.pixel_height(), cfg.eval.fps);
  r.latent.channels = cfg.arch.video_in_channels;
  r.latent.audio_channels = cfg.arch.audio_in_channels;
  const bool i2v = !p.image.empty();
  // Prompt enhancement before anything is loaded for the request, so an
  // endpoint fault costs no encoder or decoder loading (official
  // pipeline.run: enhance_prompt, then evaluate).
  if (p.enhance_prompt) {
    const EngineOptions& o = s.config;
    MAGI2_CHECK(!o.prompt_enhancement.base_url.empty(), p.label,
                ": prompt enhancement was asked for, but no endpoint is configured (--pe-base-url)");
    r.prompt_before_enhancement = p.prompt;
    try {
      r.enhancement = pe::enhance_prompt(o.prompt_enhancement, pe_request_of(o, r));
    } catch (const Error& e) {
      throw Error(pe::redact(plain_json_message(e.what()), o.prompt_enhancement.api_key));
    }
    r.params.prompt = r.enhancement->markdown;
  }
  const std::string wan_pth = (std::filesystem::path(s.model.root) / "vae" / "Wan2.2_VAE.pth").string();
  MAGI2_CHECK(!i2v || std::filesystem::is_regular_file(wan_pth), "--image needs the Wan2.2 VAE: model folder '",
              s.model.root, "' has no vae/Wan2.2_VAE.pth");
  // The memory plan of the request, before anything is loaded for it: a
  // request that cannot fit stops here with one line saying what would.
  r.memory_plan = s.planner->plan(r.params, s.budget, s.budget_source);
  MAGI2_CHECK(r.memory_plan.fits, r.memory_plan.advice);
  MAGI2_CHECK(r.memory_plan.problems.empty(), r.memory_plan.problems.front());
  if (r.memory_plan.residency == Residency::Sequential) s.residency = Residency::Sequential;  // from now on
  const bool encode = p.text_features.empty();
  r.residency_log_begin = s.log.size();
  if (encode) {
    if (!s.enc) s.follow(r.memory_plan, "encode");
    s.load_text_encoder();
    r.uncond = s.uncond_for(p.negative_prompt, p.truncate);
  }
  // The refiner and the decoders are checked before the first step, so a bad
  // checkpoint costs no denoising time: the refiner bound to its mmap'd
  // checkpoint (uploaded in its phase); the decoders loaded beside the DiT
  // when the plan holds them there, else loaded once on the CPU to check them
  // (and loaded on their backend in the decode phase).
  if (p.refines()) s.bind_refiner();
  const MemoryPlan::Phase* denoise = r.memory_plan.phase("denoise");
  if (p.decodes() && (!denoise || denoise->holds("turbovae_decode"))) {
    s.load_decoders(r.memory_plan, &r.decoder_load_ms);
  } else if (p.decodes() && !s.decoders_checked) {
    const auto t = Clock::now();
    ClipDecoders::load(s.model.root, *s.be);
    s.decoders_checked = true;
    r.decoder_load_ms += ms_since(t);
  }
  const auto t_p = Clock::now();
  if (encode) {
    // I2VA prompts get the <Figure 1> augmentation and yield the special token.
    qwen35::TextFeatures f = encode_prompt(*s.enc, r.params.prompt, i2v, p.truncate, p.label);
    r.cond = f.features;
    r.prompt_tokens = f.features.size(0);
    if (i2v) r.special_token = f.special_token;
  } else {
    auto tf = SafetensorsFile::open(p.text_features);
    r.cond = need(*tf, "raw_txt_feat", "--text-features");
    r.uncond = need(*tf, "raw_null_txt_feat", "--text-features");
    // encode-text --i2v writes the <Figure 1> token next to the features.
    MAGI2_CHECK(!i2v || tf->contains("special_token"), "--text-features ", p.text_features,
                " has no 'special_token' for --image (write it with encode-text --i2v)");
    if (i2v) r.special_token = tf->tensor("special_token");
  }
  r.prompt_ms = ms_since(t_p);
  // The Wan2.2 encoder's weights are read (and checked) here, made on their backend in the image phase.
  if (i2v && !s.wan_w) s.wan_w = std::make_unique<Wan22EncoderWeights>(Wan22EncoderWeights::load(wan_pth));
  return r;
}

GenerateOutcome Engine::generate(const GenerateParams& p, const GenerateCallbacks& cb) { return run(prepare(p), cb); }

GenerateOutcome Engine::run(const PreparedRequest& r, const GenerateCallbacks& cb) {
  State& s = *s_;
  s.bind_threads();
  const GenerateParams& p = r.params;
  const Magi2Config& cfg = s.model.config;
  const auto t_job = Clock::now();
  const bool first = s.first_run;
  s.first_run = false;
  // Sequential residency: the text encoder goes before the DiT comes.
  if (s.residency == Residency::Sequential) s.free_text_encoder();
  const MemoryPlan& plan = r.memory_plan;
  const size_t log_begin = s.log.size();
  double dit_load_ms = 0, decoder_load_ms = r.decoder_load_ms;
  GenerateRequest req;
  req.latent = r.latent;
  req.text_cond = r.cond;
  req.text_uncond = r.uncond;
  double image_ms = 0;
  if (!p.image.empty()) {
    MAGI2_CHECK(s.wan_w, "request '", p.label, "' was not prepared for a reference image");
    s.follow(plan, "image");
    s.load_wan(plan);
    const auto t_img = Clock::now();
    // The official engine encodes at the latent grid times 16 (spec pipeline §1.3).
    req.ref_image_latent = encode_reference_image(p.image, req.latent.width * 16, req.latent.height * 16, *s.wan);
    req.ref_special_token = r.special_token;
    image_ms = ms_since(t_img);
  }
  s.follow(plan, "denoise");
  if (!s.dit) {
    const auto t_dit = Clock::now();
    s.load_dit();
    dit_load_ms = ms_since(t_dit);
  }
  req.num_steps = p.steps == -1 ? cfg.eval.num_inference_steps : p.steps;
  req.shift = cfg.eval.shift;
  req.seed = p.seed;
  req.cfg.video_txt_guidance_scale = p.video_guidance_scale.value_or(cfg.eval.video_txt_guidance_scale);
  req.cfg.audio_txt_guidance_scale = p.audio_guidance_scale.value_or(cfg.eval.audio_txt_guidance_scale);
  req.cfg.use_cfg_trick = cfg.eval.use_cfg_trick;
  req.cfg.use_dynamic_cfg = cfg.eval.use_dynamic_cfg;
  req.cfg.use_skimmed_cfg_linear = cfg.eval.use_skimmed_cfg_linear;
  req.cfg.cfg_rescale = cfg.eval.cfg_rescale;
  if (!p.noise.empty()) {
    auto nf = SafetensorsFile::open(p.noise);
    req.init_latent = need(*nf, "loop_init_latent", "--noise");
    req.init_audio_latent = need(*nf, "loop_init_audio_latent", "--noise");
  }
  if (!p.routing_override.empty()) {
    auto rf = SafetensorsFile::open(p.routing_override);
    req.routing_override.resize(cfg.arch.num_layers);
    for (int l : cfg.arch.moe_layers)
      req.routing_override[l] = need(*rf, "loop_l" + std::to_string(l) + "_moe_topk_idx", "--routing-override");
  }
  const auto t_loop = Clock::now();
  // Progress and cancel need no latents (the loop stays on the device, graph
  // replayed); previews bring the latents to the host, so only when asked.
  req.on_progress = [&](int step, int steps, int64_t timestep, double ms) {
    const double elapsed = ms_since(t_loop);
    if (cb.on_progress)
      cb.on_progress({step + 1, steps, timestep, ms, elapsed, elapsed / (step + 1) * (steps - step - 1) / 1000.0});
    return !(cb.should_cancel && cb.should_cancel());
  };
  if (cb.preview_every > 0 && cb.on_preview && s.decoders)
    req.on_step = [&](GenerateStep& st) {
      if ((st.step + 1) % cb.preview_every == 0) {
        const Tensor frame = s.decoders->decode_frames(middle_frame(st.latent));
        cb.on_preview({st.step + 1, encode_png_rgb(frame.reshape({frame.size(1), frame.size(2), 3}))});
      }
      return true;
    };
  if (cb.on_log && r.enhancement)
    cb.on_log(pe::report_line(s.config.prompt_enhancement, pe_request_of(s.config, r), *r.enhancement));
  if (cb.on_log) {
    const std::string noise = p.noise.empty() ? str_cat("seed ", p.seed) : str_cat("noise from ", p.noise);
    std::string text = p.text_features.empty() ? str_cat(r.prompt_tokens, " prompt tokens")
                                               : str_cat("features from ", p.text_features);
    if (!p.image.empty())
      text += str_cat(", reference image ", p.image, " (", req.ref_image_latent.size(2), "x",
                      req.ref_image_latent.size(3), " latent)");
    char line[160];
    std::snprintf(line, sizeof line, "%lld x %lld px, %.2f s -> latent %lldx%lldx%lld + %lld audio frames",
                  (long long)p.pixel_width(), (long long)p.pixel_height(), p.seconds, (long long)req.latent.frames,
                  (long long)req.latent.height, (long long)req.latent.width, (long long)req.latent.audio_frames);
    // The FP8 modes only where the DiT runs (`magi2 refine` runs the refiner alone).
    const std::string fp8 = p.refine_from.empty() ? str_cat(", ", r.memory_plan.fp8.text()) : std::string();
    cb.on_log(str_cat("magi2: ", s.model.transformer_dir, ", ", line, ", ", req.num_steps, " step",
                      req.num_steps == 1 ? "" : "s", ", ", text, ", ", noise, fp8));
  }
  // A cancel before the first step costs no step.
  GenerateOutcome o;
  if (cb.should_cancel && cb.should_cancel()) {
    o.cancelled = true;
    return o;
  }
  GenerateResult g;
  if (p.refine_from.empty()) {
    g = generate_latents(*s.dit, req);
  } else {  // `magi2 refine`: the preview latents of an earlier --save-latents
    auto lf = SafetensorsFile::open(p.refine_from);
    g.latent = need(*lf, "final_latent", "--latents").to(DType::F32);
    g.audio_latent = need(*lf, "final_audio_latent", "--latents").to(DType::F32);
    const Shape want{1, cfg.arch.video_in_channels, req.latent.frames, req.latent.height, req.latent.width};
    MAGI2_CHECK(g.latent.shape() == want, "--latents ", p.refine_from, ": final_latent is ",
                shape_str(g.latent.shape()), ", the request (--seconds, preview size) needs ", shape_str(want));
    check_tensor(g.audio_latent, {1, req.latent.audio_frames, cfg.arch.audio_in_channels}, DType::F32,
                 str_cat("--latents ", p.refine_from, ": final_audio_latent"));
  }
  o.denoise_ms = ms_since(t_loop);
  o.steps = static_cast<int>(g.step_ms.size());
  o.latent_shape = g.latent.shape();
  o.audio_latent_shape = g.audio_latent.shape();
  if (g.cancelled) {
    o.cancelled = true;
    o.total_ms = ms_since(t_job);
    return o;
  }

  // A diverged run stops here, before any output (latents, clip, metrics) is
  // written; the message names the stream and the step count.
  check_finite(g.latent, str_cat(p.label, ": video latent after step ", o.steps));
  check_finite(g.audio_latent, str_cat(p.label, ": audio latent after step ", o.steps));
  RefineResult rf;
  if (p.refines()) {
    MAGI2_CHECK(s.refiner, "request '", p.label, "' was not prepared for the refiner");
    s.follow(plan, "refine");
    s.load_refiner();
    const auto t_ref = Clock::now();
    RefineRequest rr;
    rr.preview_latent = g.latent;
    rr.text_cond = r.cond;
    rr.text_uncond = r.uncond;
    rr.width_px = p.refiner_width;
    rr.height_px = p.refiner_height;
    rr.num_steps = p.refiner_steps;
    rr.seed = p.seed;
    rr.on_progress = [&](int step, int steps, double ms) {
      if (cb.on_log)
        cb.on_log(str_cat("refiner step ", step + 1, "/", steps, " ", static_cast<int64_t>(ms), " ms"));
      return !(cb.should_cancel && cb.should_cancel());
    };
    rf = refine_latents(*s.refiner->model, s.refiner->config, rr);
    // The decode phase of the plan holds the refiner's weights only: free its
    // activations now (on the H200 the 1080p decode ran out of memory beside them).
    s.refiner->model->release_workspace();
    o.refine_ms = ms_since(t_ref);
    o.refiner_steps = static_cast<int>(rf.step_ms.size());
    if (rf.cancelled) {
      o.cancelled = true;
      o.total_ms = ms_since(t_job);
      return o;
    }
    g.latent = rf.latent;  // the audio latent stays the preview's (docs/refiner.md §7)
    o.latent_shape = g.latent.shape();
  }
  if (!p.save_prompt_path.empty()) write_file_atomic(p.save_prompt_path, saved_prompt(p));
  if (!p.latents_path.empty())
    write_safetensors(p.latents_path, {{"final_latent", g.latent}, {"final_audio_latent", g.audio_latent}});
  DecodeTimes dt;
  double out_ms = 0;
  if (p.decodes()) {
    MAGI2_CHECK(s.decoders || s.decoders_checked, "request '", p.label, "' was not prepared for decoding");
    s.follow(plan, "decode");
    s.load_decoders(plan, &decoder_load_ms);
    Clip clip = s.decoders->decode(g.latent, g.audio_latent, &dt);
    if (p.refines()) clip.fps *= 2;  // the refiner's latent runs on the 25 fps timeline
    const auto t_out = Clock::now();
    o.report = write_outputs(clip, p.outputs);
    if (!p.thumbnail_path.empty()) {
      const Tensor& f = clip.frames;
      write_file_atomic(p.thumbnail_path, encode_png_rgb(f.slice_rows(0, 1).reshape({f.size(1), f.size(2), 3})));
    }
    o.decoded = true;
    out_ms = ms_since(t_out);
  }
  o.total_ms = first ? ms_since(s.created) : ms_since(t_job);
  if (!p.metrics_path.empty()) {
    struct rusage ru {};
    ::getrusage(RUSAGE_SELF, &ru);
    nlohmann::json m = {{"backend", s.dit_be->name()},
                        {"workspace_bytes", g.workspace_bytes},
                        {"tokens_per_forward", g.tokens},
                        {"prompt_tokens", r.prompt_tokens},
                        {"steps", g.step_ms.size()},
                        {"step_ms", g.step_ms},
                        {"refiner_step_ms", rf.step_ms},
                        {"refiner_tokens_per_forward", rf.tokens},
                        {"phase_ms",
                         {{"load", s.load_ms},
                          {"text_encoder_load_and_negative", s.text_ms},
                          {"prompt", r.prompt_ms},
                          {"reference_image", image_ms},
                          {"denoise", o.denoise_ms},
                          {"refiner_load", s.refiner_load_ms},
                          {"refine", o.refine_ms},
                          {"dit_reload", dit_load_ms},
                          {"decoder_load", decoder_load_ms},
                          {"decode_video", dt.video_ms},
                          {"decode_audio", dt.audio_ms},
                          {"outputs", out_ms},
                          {"prompt_enhancement", r.enhancement ? r.enhancement->ms : 0.0},
                          {"total", o.total_ms}}},
                        {"peak_rss_bytes", static_cast<int64_t>(ru.ru_maxrss) * 1024},
                        {"memory_plan", r.memory_plan.json()},
                        {"seed", p.seed},
                        {"latents", p.latents_path.empty() ? nlohmann::json() : nlohmann::json(p.latents_path)}};
    // --offload: the host -> device weight traffic of a step (one DiT forward: both CFG
    // branches are packed) and the rate the timed (eager) copies reached.
    nlohmann::json off = {{"mode", s.config.offload}, {"streaming", s.offload != nullptr},
                          {"pcie_bytes_per_step", 0}};
    if (s.offload) {
      const CopyQueueStats st = s.offload->stats();
      off["pcie_bytes_per_step"] = s.offload->bytes_per_forward();
      off["pcie_gb_per_s"] = st.gb_per_s();
      off["timed_copies"] = st.copies;
      off["slot_bytes"] = s.offload->slot_bytes();
      off["pinned_host_bytes"] = s.offload->pinned_bytes();
    }
    // The text encoder's layers stream per prompt forward when it runs on the GPU.
    s.note_text_stream();
    if (!s.text_stream.is_null()) off["text_encoder"] = s.text_stream;
    m["offload"] = off;
    // The stage loads and releases of this request (prepare and run), in order.
    nlohmann::json events = nlohmann::json::array();
    for (size_t i = std::min(r.residency_log_begin, log_begin); i < s.log.size(); ++i)
      events.push_back({{"stage", s.log[i].stage}, {"loaded", s.log[i].loaded}, {"bytes", s.log[i].bytes},
                        {"ms", s.log[i].ms}});
    m["residency_events"] = events;
    if (o.decoded) m["outputs"] = o.report.to_json(p.outputs);
    m["prompt_enhancement"] = r.enhancement ? pe::metrics_json(s.config.prompt_enhancement, pe_request_of(s.config, r),
                                                               *r.enhancement)
                                            : nlohmann::json();
    m["prompt_chars"] = qwen35::utf8_decode(p.prompt, "prompt").size();
    m.update(r.memory_plan.fp8.json());  // weights, fp8_compute, attention_compute, linear_compute
    write_file_atomic(p.metrics_path, m.dump(2) + "\n");
  }
  return o;
}

}  // namespace magi2
