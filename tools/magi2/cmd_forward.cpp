// `magi2 forward`: one DiT forward on packed inputs in the golden schema
// ({P}in_x, {P}in_coords, {P}in_modality, {P}in_cu_seqlens, {P}in_time_emb),
// writing {P}out [N, 64] f32. For parity testing against the official code.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>

#include "cache_env.h"
#include "commands.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "engine/model_files.h"
#include "engine/params.h"
#include "pipeline/device_select.h"
#include "models/magi2_dit/dit.h"
#include "weights_option.h"

namespace magi2::cli {

namespace {

struct ForwardArgs {
  std::string config, transformer, inputs, prefix, routing_override, output;
  int threads = 0;
  std::string device = "cpu", weights = "auto", router_bias = "ema", cuda_attention = "auto";
  std::string fp8_compute = "w8a16", attention_compute = "bf16", linear_compute = "bf16";
};

Tensor input(const SafetensorsFile& f, const std::string& name) {
  if (!f.contains(name)) throw Error(str_cat("inputs '", f.path(), "' have no tensor '", name, "'"));
  return f.tensor(name);
}

int run_forward(const ForwardArgs& a) {
  check_output_path(a.output, "-o");
  LoadedDit dit = load_dit(resolve_model(a.transformer, cache_env()), "", a.config,
                           expert_weights_from_name(a.weights, "--weights"));
  auto f = SafetensorsFile::open(a.inputs);
  DitInputs in;
  const std::string& p = a.prefix;
  in.x = input(*f, p + "in_x").to(DType::F32);
  in.coords = input(*f, p + "in_coords").to(DType::F32);
  in.modality = input(*f, p + "in_modality").to(DType::I32);
  in.time_emb = input(*f, p + "in_time_emb").to(DType::F32);
  Tensor cu = input(*f, p + "in_cu_seqlens").to(DType::I32);
  MAGI2_CHECK(cu.dim() == 1, "inputs: ", p, "in_cu_seqlens must be 1-D");
  for (int64_t i = 0; i < cu.numel(); ++i) in.cu_seqlens.push_back(cu.data_as<int32_t>()[i]);

  DitRunOptions opt;
  if (!a.routing_override.empty()) {
    auto r = SafetensorsFile::open(a.routing_override);
    opt.forced_topk.resize(dit.config.arch.num_layers);
    for (int l : dit.config.arch.moe_layers)
      opt.forced_topk[l] = input(*r, p + "l" + std::to_string(l) + "_moe_topk_idx").to(DType::I32);
  }
  dit.weights.router_bias_from_ema = router_bias_from_ema(a.router_bias, "--router-bias");
  dit.weights.fp8_compute = fp8_compute_from_name(a.fp8_compute, "--fp8-compute");
  dit.weights.fp8_attention = fp8_from_compute_name(a.attention_compute, "--attention-compute");
  if (fp8_from_compute_name(a.linear_compute, "--linear-compute")) dit.weights.quantize_linears();
  auto be = make_backend_for(a.device, a.threads, {.attention = a.cuda_attention});
  DitWeights w = be->device() == Device::CPU ? dit.weights : dit.weights.to_backend(*be);
  w.prepare_banks(*be);
  Dit model(dit.config.arch, w, *be);
  const auto t0 = std::chrono::steady_clock::now();
  Tensor out = to_host(*be, model.forward(in, opt));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  write_safetensors(a.output, {{p + "out", out}});
  std::printf("forward: %lld tokens, %zu samples, %.1f ms (%s backend) -> %s [%s]\n",
              static_cast<long long>(in.x.size(0)), in.cu_seqlens.size() - 1, ms, be->name(), a.output.c_str(),
              (p + "out").c_str());
  return 0;
}

}  // namespace

Command forward_command() {
  return make_command<ForwardArgs>([](CLI::App& app, ForwardArgs& a) {
    CLI::App* s = app.add_subcommand("forward", "run one DiT forward on packed inputs (parity testing)");
    s->add_option("--config", a.config, "config in the official JSON layout (default: built-in release)")
        ->envname("MAGI2_CONFIG");
    s->add_option("--transformer", a.transformer,
                  "DiT checkpoint folder, model root with preview/, or builtin:tiny")
        ->required()
        ->envname("MAGI2_TRANSFORMER");
    s->add_option("--inputs", a.inputs, "safetensors with {P}in_x, {P}in_coords, {P}in_modality, "
                                            "{P}in_cu_seqlens, {P}in_time_emb")
        ->required()
        ->envname("MAGI2_INPUTS");
    s->add_option("--prefix", a.prefix, "tensor name prefix P (e.g. t2v_)")->envname("MAGI2_PREFIX");
    s->add_option("--routing-override", a.routing_override,
                  "testing: take the expert selection from {P}l{layer}_moe_topk_idx [heads,N,k] in this file")
        ->envname("MAGI2_ROUTING_OVERRIDE");
    s->add_option("-o,--output", a.output, "output safetensors, receives {P}out [N,64] f32")
        ->required()
        ->envname("MAGI2_OUTPUT");
    s->add_option("--threads", a.threads, "CPU threads, 0..1024 (0: all)")
        ->check(CLI::Range(0, Limits::kMaxThreads))->envname("MAGI2_THREADS");
    s->add_option("--device", a.device, "cpu (default: the reference), cuda or auto")
        ->envname("MAGI2_DEVICE")
        ->capture_default_str();
    add_weights_option(s, a.weights);
    add_router_bias_option(s, a.router_bias);
    add_cuda_attention_option(s, a.cuda_attention);
    add_fp8_compute_option(s, a.fp8_compute);
    add_attention_compute_option(s, a.attention_compute);
    add_linear_compute_option(s, a.linear_compute);
    return s;
  }, run_forward);
}

}  // namespace magi2::cli
