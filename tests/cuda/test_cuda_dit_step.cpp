// The DiT and the whole denoising step on the CUDA backend (skipped without a
// GPU): the golden DiT with forced routing, a mid-size random DiT against the
// CPU backend, the sampler ops bit for bit, the device-resident loop (graph
// replay = eager bytes, run-to-run identical, the teacher-forced golden loop),
// and the proof that a captured step has no host sync or allocation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "cuda/cuda_fixture.h"
#include "golden/dit_fixture.h"
#include "pipeline/flow_unipc.h"
#include "pipeline/generate.h"
#include "pipeline/packing.h"
#include "engine/tiny_model.h"

namespace magi2::test {
namespace {

class CudaDitStep : public CudaParityTest {};

Diff report(const char* what, const Tensor& got, const Tensor& ref) {
  const Diff d = compare(got, ref);
  std::printf("  %-40s rel_rms %.5f  max_abs %.5f  (ref rms %.3f)\n", what, d.rel_rms, d.max_abs, d.ref_rms);
  return d;
}

TEST_F(CudaDitStep, GoldenDitWithForcedRoutingOnCuda) {
  GoldenDit& g = GoldenDit::get();
  const DitWeights w = g.weights.to_backend(*gpu_);
  Dit dit(g.config.arch, w, *gpu_);
  Dit ref_dit(g.config.arch, g.weights, *cpu_);
  for (const std::string p : {"t2v_", "i2v_"}) {
    DitRunOptions opt;
    opt.forced_topk = g.forced_topk(p);
    const Tensor got = to_host(*gpu_, dit.forward(g.inputs(p), opt)).clone();
    const Diff d = report((p + "out vs official").c_str(), got, g.io->tensor(p + "out"));
    EXPECT_LE(d.rel_rms, 0.025);  // the CPU backend's bound (test_dit_golden)
    EXPECT_LE(d.max_abs, 0.12);
    const Tensor cpu = ref_dit.forward(g.inputs(p), opt).clone();
    // Two bf16 implementations, each ~0.01 from the official run (measured on
    // the H200: 0.0103 / 0.0101 apart).
    const Diff dc = report((p + "out vs CPU backend").c_str(), got, cpu);
    EXPECT_LE(dc.rel_rms, 0.02);
  }
}

// A mid-size random configuration with the release's layer kinds and head
// dim: hidden 512 (4 x 128 attention heads), 8 layers (mm 0 and 7, MoE 2-5),
// 8 MoE heads x 64 experts top-6, mHC 4 streams.
DitArch mid_arch() {
  DitArch a = tiny_config().arch;
  a.num_layers = 8;
  a.hidden_size = 512;
  a.head_dim = 128;
  a.num_query_groups = 4;
  a.mm_layers = {0, 7};
  a.moe_layers = {2, 3, 4, 5};
  a.moe_num_heads = 8;
  a.moe_num_experts = 64;
  a.moe_top_k = 6;
  a.moe_expert_intermediate_size = 256;
  a.moe_shared_expert_intermediate_size = 256;
  a.moe_modality_specific_expert_intermediate_size = 384;
  a.validate("mid-size test config");
  return a;
}

PackedDitInputs mid_inputs(const DitArch& a, PackingPlan& plan) {
  PackingShapes sh;
  sh.latent = latent_shape_for_clip(2.0, 192, 128);  // 4 x 8 x 12 latent + 50 audio frames
  sh.text_channels = a.text_in_channels;
  sh.text_len_cond = 37;
  sh.text_len_uncond = 11;
  plan = make_packing_plan(sh);
  auto rnd = [](const Shape& s, uint64_t seed) {
    return random_dit_tensor({"moe_mlp.W_gate", s, DType::F32}, seed);  // N(0, 2/sqrt(dim 1))-ish values
  };
  PackingConditioning cond;
  cond.text_cond = rnd({37, a.text_in_channels}, 3);
  cond.text_uncond = rnd({11, a.text_in_channels}, 4);
  const LatentShape& L = sh.latent;
  return pack_dit_inputs(plan, rnd({L.channels, L.frames, L.height, L.width}, 5), rnd({L.audio_frames, 64}, 6),
                         cond, 741.0f);
}

TEST_F(CudaDitStep, MidSizeRandomDitMatchesCpu) {
  const DitArch a = mid_arch();
  const DitWeights hw = DitWeights::generate(a, [](const DitTensorSpec& s) { return random_dit_tensor(s, 11); });
  const DitWeights dw = hw.to_backend(*gpu_);
  PackingPlan plan;
  const PackedDitInputs p = mid_inputs(a, plan);
  DitInputs in{p.x, p.coords, p.modality, p.time_emb, {}};
  for (int64_t i = 0; i < p.cu_seqlens.numel(); ++i) in.cu_seqlens.push_back(p.cu_seqlens.data_as<int32_t>()[i]);

  Dit cpu_dit(a, hw, *cpu_), gpu_dit(a, dw, *gpu_);
  std::vector<Tensor> routes(a.num_layers);
  DitRunOptions dump_opt;
  dump_opt.dump = [&](const std::string& name, const Tensor& t) {
    for (int l : a.moe_layers)
      if (name == str_cat("l", l, "_moe_topk_idx")) routes[l] = t.clone();
  };
  const Tensor cpu_out = cpu_dit.forward(in, dump_opt).clone();
  // Natural routing on both backends (the router is bit-exact, the GEMMs are
  // not: near-ties may flip), then the CPU's selection forced on the GPU.
  const Tensor nat = to_host(*gpu_, gpu_dit.forward(in)).clone();
  report("mid-size natural routing vs CPU", nat, cpu_out);
  DitRunOptions forced;
  forced.forced_topk = routes;
  const Tensor got = to_host(*gpu_, gpu_dit.forward(in, forced)).clone();
  const Diff d = report("mid-size forced routing vs CPU", got, cpu_out);
  EXPECT_LE(d.rel_rms, 0.03);  // measured 0.0201 on the H200 (8 layers of bf16 rounding differences)
  // Deterministic: the same forward again gives the same bytes.
  const Tensor again = to_host(*gpu_, gpu_dit.forward(in, forced)).clone();
  EXPECT_EQ(count_diff(again, got, "mid-size forward, second run"), 0);
}

TEST_F(CudaDitStep, SamplerOpsMatchCpuBitForBit) {
  const int64_t n = 100003, steps = 7;
  FlowUniPC sched;
  sched.set_timesteps(static_cast<int>(steps), 7.0);
  const auto table = sched.step_table();
  Tensor coef = Tensor::empty({steps, 16}, DType::F32);
  std::memcpy(coef.data(), table.data(), table.size() * sizeof(UniPcStepCoef));
  Tensor x = random({n}, DType::F32), v = random({n}, DType::F32), pred = random({2, n}, DType::F32);
  Tensor st[3] = {random({n}, DType::F32), random({n}, DType::F32), random({n}, DType::F32)};
  for (int step = 0; step < static_cast<int>(steps); ++step) {
    Tensor sc = Tensor::from_i32({1}, {step});
    Tensor hx = x.clone(), hl = st[0].clone(), h0 = st[1].clone(), h1 = st[2].clone();
    cpu_->flow_unipc_step({.sample = hx, .v = v, .last = hl, .m0 = h0, .m1 = h1, .coef = coef, .step = sc});
    Tensor dx = up(x), dl = up(st[0]), d0 = up(st[1]), d1 = up(st[2]);
    gpu_->flow_unipc_step(
        {.sample = dx, .v = up(v), .last = dl, .m0 = d0, .m1 = d1, .coef = up(coef), .step = up(sc)});
    EXPECT_EQ(count_diff(down(dx), hx, "flow_unipc_step sample"), 0);
    EXPECT_EQ(count_diff(down(dl), hl, "flow_unipc_step last"), 0);
    EXPECT_EQ(count_diff(down(d0), h0, "flow_unipc_step m0"), 0);
    EXPECT_EQ(count_diff(down(d1), h1, "flow_unipc_step m1"), 0);
  }
  Tensor hv = Tensor::empty({n}, DType::F32), dv = gpu_->alloc({n}, DType::F32);
  cpu_->cfg_combine({.pred = pred, .v = hv, .scale = 5.f});
  gpu_->cfg_combine({.pred = up(pred), .v = dv, .scale = 5.f});
  EXPECT_EQ(count_diff(down(dv), hv, "cfg_combine"), 0);
  // copy_elems with a permutation, fill_rows, advance_step, nonfinite_check.
  std::vector<int32_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % n);
  Tensor pi = Tensor::from_i32({n}, perm), hc = Tensor::zeros({n}, DType::F32), dc = up(Tensor::zeros({n}, DType::F32));
  cpu_->copy_elems({.src = x, .dst = hc, .src_index = pi});
  gpu_->copy_elems({.src = up(x), .dst = dc, .src_index = up(pi)});
  EXPECT_EQ(count_diff(down(dc), hc, "copy_elems"), 0);
  Tensor tab = random({steps, 64}, DType::F32), rows = Tensor::from_i32({3}, {5, 0, 9});
  Tensor ho = Tensor::zeros({10, 64}, DType::F32), dout = up(ho), s3 = Tensor::from_i32({1}, {3});
  cpu_->fill_rows({.table = tab, .step = s3, .rows = rows, .out = ho});
  gpu_->fill_rows({.table = up(tab), .step = up(s3), .rows = up(rows), .out = dout});
  EXPECT_EQ(count_diff(down(dout), ho, "fill_rows"), 0);
  Tensor ds = up(s3);
  gpu_->advance_step({.step = ds});
  EXPECT_EQ(down(ds).data_as<int32_t>()[0], 4);
  Tensor bad = x.clone();
  bad.data_as<float>()[777] = std::numeric_limits<float>::quiet_NaN();
  Tensor first = up(Tensor::from_i32({2}, {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::max()}));
  gpu_->nonfinite_check({.x = up(x), .first = first, .step = ds, .slot = 0});
  gpu_->nonfinite_check({.x = up(bad), .first = first, .step = ds, .slot = 1});
  const Tensor f = down(first);
  EXPECT_EQ(f.data_as<int32_t>()[0], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(f.data_as<int32_t>()[1], 4);
}

GenerateRequest tiny_request(const GoldenDit& g, int steps) {
  GenerateRequest req;
  req.latent = latent_shape_for_clip(0.4, 96, 64);
  req.text_cond = g.io->tensor("raw_txt_feat");
  req.text_uncond = g.io->tensor("raw_null_txt_feat");
  req.num_steps = steps;
  req.shift = g.config.eval.shift;
  req.seed = 1234;
  return req;
}

TEST_F(CudaDitStep, DenoiseLoopOnCudaIsGraphReplayedAndDeterministic) {
  GoldenDit& g = GoldenDit::get();
  const DitWeights w = g.weights.to_backend(*gpu_);
  Dit dit(g.config.arch, w, *gpu_);
  Dit ref_dit(g.config.arch, g.weights, *cpu_);
  GenerateRequest req = tiny_request(g, 5);
  const GenerateResult graph1 = generate_latents(dit, req);
  const GenerateResult graph2 = generate_latents(dit, req);
  req.use_graph = false;
  const GenerateResult eager = generate_latents(dit, req);
  EXPECT_EQ(count_diff(graph2.latent, graph1.latent, "loop latent, second graph run"), 0);
  EXPECT_EQ(count_diff(graph2.audio_latent, graph1.audio_latent, "loop audio latent, second graph run"), 0);
  EXPECT_EQ(count_diff(eager.latent, graph1.latent, "loop latent, eager vs graph"), 0);
  EXPECT_EQ(count_diff(eager.audio_latent, graph1.audio_latent, "loop audio latent, eager vs graph"), 0);
  const GenerateResult cpu = generate_latents(ref_dit, req);
  // Free-running with natural routing, CFG 5/7 amplify bf16-level
  // differences and flip near-tie expert choices on the random tiny net (the
  // official code against itself ends 0.74-1.02 apart, docs/parity.md): reported
  // only; per-step agreement is the teacher-forced test below.
  const Diff dv = report("5-step loop video, CUDA vs CPU (free-running)", graph1.latent, cpu.latent);
  const Diff da = report("5-step loop audio, CUDA vs CPU (free-running)", graph1.audio_latent, cpu.audio_latent);
  EXPECT_TRUE(std::isfinite(dv.rel_rms) && std::isfinite(da.rel_rms));
  std::printf("  step ms:");
  for (double ms : graph1.step_ms) std::printf(" %.2f", ms);
  std::printf("  (workspace %.1f MB)\n", graph1.workspace_bytes / 1e6);
}

TEST_F(CudaDitStep, TeacherForcedGoldenLoopOnCuda) {
  GoldenDit& g = GoldenDit::get();
  auto sampler = SafetensorsFile::open(golden_dir() + "/dit_tiny/sampler.safetensors");
  const Tensor gv = sampler->tensor("loop_latent_after_step"), ga = sampler->tensor("loop_audio_latent_after_step");
  const DitWeights w = g.weights.to_backend(*gpu_);
  Dit dit(g.config.arch, w, *gpu_);
  GenerateRequest req = tiny_request(g, static_cast<int>(gv.size(0)));
  req.init_latent = sampler->tensor("loop_init_latent");
  req.init_audio_latent = sampler->tensor("loop_init_audio_latent");
  req.routing_override.resize(g.config.arch.num_layers);
  for (int l : g.config.arch.moe_layers)
    req.routing_override[l] = sampler->tensor(str_cat("loop_l", l, "_moe_topk_idx"));
  double worst_v = 0, worst_a = 0;
  req.on_step = [&](GenerateStep& st) {
    Tensor rv = gv.slice_rows(st.step, st.step + 1).reshape(st.latent.shape());
    Tensor ra = ga.slice_rows(st.step, st.step + 1).reshape(st.audio_latent.shape());
    worst_v = std::max(worst_v, compare(st.latent, rv).rel_rms);
    worst_a = std::max(worst_a, compare(st.audio_latent, ra).rel_rms);
    if (st.step + 1 < st.steps) {
      st.latent = rv.clone();
      st.audio_latent = ra.clone();
    }
    return true;
  };
  const GenerateResult r = generate_latents(dit, req);
  std::printf("  teacher-forced per-step worst rel_rms: video %.5f audio %.5f\n", worst_v, worst_a);
  // The CPU backend's per-step bounds (test_generate_golden). The final latents get 0.035 where the CPU has
  // 0.03: measured on the H200 0.027 video / 0.032 audio, because cuDNN rounds P to bf16 before P V (as the
  // official FA3 does; the CPU reference keeps fp32) and the grouped-GEMM experts round gate/up to bf16
  // before SwiGLU7 (docs/cuda.md).
  EXPECT_LE(worst_v, 0.04);
  EXPECT_LE(worst_a, 0.04);
  EXPECT_LE(report("final video latent vs official", r.latent, sampler->tensor("loop_final_latent")).rel_rms, 0.035);
  EXPECT_LE(report("final audio latent vs official", r.audio_latent, sampler->tensor("loop_final_audio_latent")).rel_rms,
            0.035);
}

TEST_F(CudaDitStep, CaptureFailsOnHostSyncOrAllocation) {
  Tensor d = up(random({1024}, DType::F32));
  EXPECT_TRUE(throws_with([&] { gpu_->capture([&] { gpu_->alloc({16}, DType::F32); }); }, {"alloc", "captur"}));
  EXPECT_TRUE(throws_with([&] { gpu_->capture([&] { (void)to_host(*gpu_, d); }); }, {"captur"}));
  // The backend is usable after a failed capture.
  Tensor o = gpu_->alloc({1024}, DType::F32);
  gpu_->copy({.src = d, .dst = o});
  EXPECT_EQ(count_diff(down(o), down(d), "copy after a failed capture"), 0);
}

}  // namespace
}  // namespace magi2::test
