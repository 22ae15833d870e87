// FP8 routed experts (W8A16 and W8A8, docs/fp8.md) on the tiny golden model:
// how far the 6-step loop lands from the official bf16 sampler, beside the
// bf16 run's own distance, and how often natural routing keeps its expert
// selection (W8A16).
// The numbers printed here are the ones docs/parity.md records; the bounds
// are loose on purpose (random tiny weights, quality of the real checkpoint
// is not measured by this).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>

#include "golden/loop_fixture.h"

namespace magi2::test {
namespace {

// The golden weights with FP8 routed experts (quantised from the golden bf16 banks).
const DitWeights& fp8_weights() {
  static const DitWeights w = [] {
    DitWeights x = GoldenDit::get().weights;
    x.quantize_experts();
    return x;
  }();
  return w;
}

// The same FP8 banks computed as W8A8 (e4m3 activations in 1 x 128 groups).
const DitWeights& w8a8_weights() {
  static const DitWeights w = [] {
    DitWeights x = fp8_weights();
    x.fp8_compute = Fp8Compute::W8A8;
    return x;
  }();
  return w;
}

struct LoopDistance {
  double worst_step_v = 0, worst_step_a = 0, final_v = 0, final_a = 0;
};

// The golden loop of test_generate_golden (forced routing, teacher-forced latents).
LoopDistance run_loop(const DitWeights& w) {
  GoldenDit& g = GoldenDit::get();
  auto sampler = SafetensorsFile::open(golden_dir() + "/dit_tiny/sampler.safetensors");
  auto be = make_cpu_backend();
  Dit dit(g.config.arch, w, *be);
  GenerateRequest req = golden_loop_request(g, *sampler);
  Tensor gv = sampler->tensor("loop_latent_after_step"), ga = sampler->tensor("loop_audio_latent_after_step");
  LoopDistance d;
  req.on_step = [&](GenerateStep& st) {
    Tensor rv = gv.slice_rows(st.step, st.step + 1).reshape(st.latent.shape());
    Tensor ra = ga.slice_rows(st.step, st.step + 1).reshape(st.audio_latent.shape());
    d.worst_step_v = std::max(d.worst_step_v, compare(st.latent, rv).rel_rms);
    d.worst_step_a = std::max(d.worst_step_a, compare(st.audio_latent, ra).rel_rms);
    if (st.step + 1 < st.steps) {
      st.latent = rv.clone();
      st.audio_latent = ra.clone();
    }
    return true;
  };
  GenerateResult r = generate_latents(dit, req);
  d.final_v = compare(r.latent, sampler->tensor("loop_final_latent")).rel_rms;
  d.final_a = compare(r.audio_latent, sampler->tensor("loop_final_audio_latent")).rel_rms;
  return d;
}

// run_loop once per weights object (the tests below share the bf16 and W8A16 runs).
const LoopDistance& loop_of(const DitWeights& w) {
  static std::map<const DitWeights*, LoopDistance> done;
  auto it = done.find(&w);
  if (it == done.end()) it = done.emplace(&w, run_loop(w)).first;
  return it->second;
}

TEST(Fp8Golden, LoopDistanceToTheOfficialBf16SamplerBesideTheBf16Run) {
  const LoopDistance &b = loop_of(GoldenDit::get().weights), &f = loop_of(fp8_weights());
  std::printf("  bf16 experts: worst step rel_rms video %.5f audio %.5f; final video %.5f audio %.5f\n",
              b.worst_step_v, b.worst_step_a, b.final_v, b.final_a);
  std::printf("  FP8 experts:  worst step rel_rms video %.5f audio %.5f; final video %.5f audio %.5f\n",
              f.worst_step_v, f.worst_step_a, f.final_v, f.final_a);
  EXPECT_LE(b.final_v, 0.03);  // the bf16 bound of test_generate_golden
  EXPECT_LE(f.worst_step_v, 0.25);
  EXPECT_LE(f.worst_step_a, 0.25);
}

TEST(Fp8Golden, W8a8LoopDistanceBesideW8a16AndBf16) {
  const LoopDistance &b = loop_of(GoldenDit::get().weights), &f = loop_of(fp8_weights()),
                     &q = loop_of(w8a8_weights());
  std::printf("  bf16 experts:  worst step rel_rms video %.5f audio %.5f; final video %.5f audio %.5f\n",
              b.worst_step_v, b.worst_step_a, b.final_v, b.final_a);
  std::printf("  FP8 W8A16:     worst step rel_rms video %.5f audio %.5f; final video %.5f audio %.5f\n",
              f.worst_step_v, f.worst_step_a, f.final_v, f.final_a);
  std::printf("  FP8 W8A8:      worst step rel_rms video %.5f audio %.5f; final video %.5f audio %.5f\n",
              q.worst_step_v, q.worst_step_a, q.final_v, q.final_a);
  EXPECT_NE(q.final_v, f.final_v);  // the option takes effect
  EXPECT_LE(q.worst_step_v, 0.3);
  EXPECT_LE(q.worst_step_a, 0.3);
  EXPECT_LE(q.final_v, 0.3);
  EXPECT_LE(q.final_a, 0.3);
}

// Natural routing with FP8 experts against the bf16 run's natural routing,
// MoE layer by MoE layer (earlier MoE layers forced to the golden selection,
// as test_dit_routing): the first MoE layer's router sees identical inputs, so
// differences start at the second.
TEST(Fp8Golden, NaturalRoutingAgreement) {
  GoldenDit& g = GoldenDit::get();
  auto be = make_cpu_backend();
  const auto& a = g.config.arch;
  Dit d16(a, g.weights, *be), d8(a, fp8_weights(), *be);
  for (const std::string px : {"t2v_", "i2v_"})
    for (int l : a.moe_layers) {
      Tensor sel;
      const DitRunOptions opt = g.natural_routing_at(px, l, &sel);
      d16.forward(g.inputs(px), opt);
      const Tensor s16 = sel;
      d8.forward(g.inputs(px), opt);
      const Tensor s8 = sel;
      ASSERT_TRUE(s16.defined() && s8.defined());
      const Tensor margin = g.io->tensor(str_cat(px, "l", l, "_moe_select_margin"));
      const int64_t heads = s16.size(0), n = s16.size(1), k = s16.size(2);
      int64_t agree = 0, clear = 0, clear_agree = 0;
      for (int64_t i = 0; i < heads * n; ++i) {
        const int32_t *x = s16.data_as<int32_t>() + i * k, *y = s8.data_as<int32_t>() + i * k;
        const bool same = std::set<int32_t>(x, x + k) == std::set<int32_t>(y, y + k);
        agree += same;
        if (margin.data_as<float>()[i] > 0.01f) ++clear, clear_agree += same;
      }
      std::printf("  %sl%d: FP8 vs bf16 natural selection: %lld/%lld (head, token) sets agree; %lld/%lld with "
                  "margin > 0.01\n",
                  px.c_str(), l, (long long)agree, (long long)(heads * n), (long long)clear_agree, (long long)clear);
      EXPECT_GE(static_cast<double>(agree) / static_cast<double>(heads * n), 0.8) << px << l;
    }
}

}  // namespace
}  // namespace magi2::test
