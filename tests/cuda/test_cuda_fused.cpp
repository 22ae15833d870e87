// The opt-in fast mHC and router kernels (src/cuda/fused_kernels.h, switched
// on by MAGI2_MHC_KERNEL=fused / MAGI2_ROUTER_KERNEL=fused) against the CPU
// reference backend on random inputs at DiT-like shapes. Stated bounds:
// - mHC logits (bf16 tensor cores, three-term split of (1 + w) * phi): max
//   |GPU - CPU| <= 1e-4 x max |CPU| (fp32 rounding noise is ~1e-7 of it; a
//   lost split term or a misplaced fragment is >= 1e-3);
// - mHC pre and post + residual: bit for bit (same fp32 operations), the
//   default post kernel (MhcPostKernel::kLean) also bit for bit with the first
//   one (kRing) on a state with NaNs and infinities planted;
// - router: the same experts on every (head, token) whose CPU selection margin
//   exceeds 0.01 and weights within 3e-5 relative; bit for bit where the
//   logits are exact (zero gate rows) and for forced routing's indices; and
//   its two selections (RouteSelect) bit for bit on the same logits, planted
//   ties and non-finite scores included.
// Each fast launcher must accept these shapes (returns true), so the test
// cannot pass on the reference fallback. Skips when no GPU is present (CI).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "cuda/backend_cuda.h"
#include "cuda/fused_kernels.h"
#include "cuda/mhc_moe.h"
#include "cuda_fixture.h"
#include "ops/numerics.h"
#include "ops/ops.h"

namespace magi2 {
namespace test {
uint64_t sigmoid_fast_mismatches(cudaStream_t s);  // sigmoid_fast_check.cu
}  // namespace test
namespace {

using test::count_diff;
using test::plant_route_ties;
using test::print_route_case;
using test::RouteCase;

class CudaFusedTest : public test::CudaParityTest {
 protected:
  CudaFusedTest() : CudaParityTest(4321) {}
  void SetUp() override {
    CudaParityTest::SetUp();
    if (!gpu_) return;
    scratch_ = test::split_scratch_on(*gpu_);
  }
  cudaStream_t stream() { return static_cast<cudaStream_t>(cuda_stream_of(*gpu_)); }
  /// max |got - ref| (infinite where a difference is NaN) and max |ref| of two CPU f32 tensors.
  struct MaxErr {
    double err = 0, ref = 0;
  };
  static MaxErr max_err(const Tensor& got, const Tensor& ref) {
    MaxErr m;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      m.ref = std::max(m.ref, std::fabs(static_cast<double>(ref.data_as<float>()[i])));
      const double e = std::fabs(static_cast<double>(got.data_as<float>()[i]) - ref.data_as<float>()[i]);
      m.err = std::isnan(e) ? INFINITY : std::max(m.err, e);
    }
    return m;
  }
  /// A CPU f32 tensor holding `v`.
  static Tensor values(const Shape& shape, const std::vector<float>& v) {
    Tensor t = Tensor::empty(shape, DType::F32);
    std::copy(v.begin(), v.end(), t.data_as<float>());
    return t;
  }
  /// A router case's inputs on the host and on the device: random rows, gate
  /// and bias with plant_route_ties' ties, `plant` (optional) on top, and
  /// forced distinct experts drawn with `forced_seed`.
  struct RouteInputs {
    Tensor r, gate, bias, forced, r_g, gate_g, bias_g, forced_g;
  };
  RouteInputs route_inputs(const RouteCase& rc, uint32_t forced_seed,
                           const std::function<void(Tensor&, Tensor&, Tensor&)>& plant = {}) {
    print_route_case(rc);
    RouteInputs in;
    in.r = random({rc.t, rc.mh * rc.dh}, DType::BF16, 1.2f);
    in.gate = random({rc.mh * rc.ne, rc.dh}, DType::F32, 1.f / std::sqrt(static_cast<float>(rc.dh)));
    in.bias = random({rc.mh * rc.ne}, DType::F32, 0.3f);
    plant_route_ties(in.gate, in.bias, rc.ne, rc.dh);
    if (plant) plant(in.r, in.gate, in.bias);
    in.forced = test::random_routes(rc.mh, rc.t, rc.ne, rc.k, forced_seed);
    in.r_g = up(in.r), in.gate_g = up(in.gate), in.bias_g = up(in.bias), in.forced_g = up(in.forced);
    return in;
  }
  std::unique_ptr<cuda::SplitScratch> scratch_;
};

// ---- mHC ------------------------------------------------------------------------

struct MhcCase {
  int64_t t, d;
  int groups;
};

TEST_F(CudaFusedTest, MhcLogitsWithinFp32AndPrePostBitForBit) {
  for (const MhcCase mc : {MhcCase{127, 256, 1}, MhcCase{300, 3072, 3}, MhcCase{1000, 3072, 1}}) {
    const int64_t t = mc.t, d = mc.d, vw = 4 * d;
    Groups g = Groups::single(t);
    if (mc.groups == 3) g.cu = {0, t / 2, t * 5 / 6, t}, g.count = 3;
    std::printf("[D=%lld T=%lld groups=%d]\n", static_cast<long long>(d), static_cast<long long>(t), mc.groups);
    const float c = 1.0f / std::sqrt(static_cast<float>(vw));
    Tensor state = random({t, vw}, DType::BF16, 1.5f);
    Tensor norm_w = random({mc.groups * vw}, DType::F32, 0.1f);
    Tensor phi = random({vw, 24}, DType::F32, 1.f);
    MhcBranchWeights wc{.alpha_pre = values({1}, {0.8f}), .alpha_post = values({1}, {1.1f}),
                        .alpha_res = values({1}, {2.5f}), .bias_pre = random({4}, DType::F32, 0.5f),
                        .bias_post = random({4}, DType::F32, 0.5f), .bias_res = random({4, 4}, DType::F32, 1.f)};
    MhcBranchWeights wg{.alpha_pre = up(wc.alpha_pre), .alpha_post = up(wc.alpha_post),
                        .alpha_res = up(wc.alpha_res), .bias_pre = up(wc.bias_pre),
                        .bias_post = up(wc.bias_post), .bias_res = up(wc.bias_res)};
    const Tensor state_g = up(state);

    Tensor lc = Tensor::empty({t, 24}, DType::F32), lg = poisoned({t, 24}, DType::F32);
    cpu_->mhc_logits({.state = state, .norm_w = norm_w, .phi = phi, .logits = lc, .groups = g});
    const MhcLogitsParams pl{.state = state_g, .norm_w = up(norm_w), .phi = up(phi), .logits = lg, .groups = g};
    ASSERT_TRUE(cuda::mhc_logits_fused(pl, *scratch_, stream()));
    const Tensor lh = down(lg);
    const MaxErr le = max_err(lh, lc);
    std::printf("  logits: max |fused - cpu| = %.3g, max |cpu| = %.3g (ratio %.3g, bound 1e-4)\n", le.err, le.ref,
                le.err / le.ref);
    EXPECT_LE(le.err, 1e-4 * le.ref);
    // Through the checked entry point with the fast path selected (mhc_logits_pass where D % 128 == 0, else
    // the ring kernel above): within the same bound, and the same bytes run to run (deterministic).
    const cuda::FusedPaths fast{.mhc = true, .router = false, .scratch = scratch_.get()};
    MhcLogitsParams pl2 = pl;
    pl2.logits = poisoned({t, 24}, DType::F32);
    cuda::mhc_logits(pl2, stream(), &fast);
    const Tensor lh2 = down(pl2.logits);
    const MaxErr le2 = max_err(lh2, lc);
    std::printf("  logits, checked entry point: max |gpu - cpu| = %.3g (ratio %.3g, bound 1e-4)\n", le2.err,
                le2.err / le2.ref);
    EXPECT_LE(le2.err, 1e-4 * le2.ref);
    pl2.logits = poisoned({t, 24}, DType::F32);
    cuda::mhc_logits(pl2, stream(), &fast);
    EXPECT_EQ(count_diff(down(pl2.logits), lh2, "  logits run to run"), 0);

    const Tensor logits_g = up(lc);  // the CPU's logits feed both backends below
    Tensor ac = Tensor::empty({t, d}, DType::BF16), hc = Tensor::empty({t, 4}, DType::F32);
    Tensor ag = poisoned({t, d + 8}, DType::BF16), hg = poisoned({t, 4}, DType::F32);
    cpu_->mhc_pre({.state = state, .logits = lc, .w = &wc, .a = ac, .h_pre = hc, .c = c});
    ASSERT_TRUE(cuda::mhc_pre_fused(
        {.state = state_g, .logits = logits_g, .w = &wg, .a = ag.slice_cols(8, d + 8), .h_pre = hg, .c = c},
        stream()));
    EXPECT_EQ(count_diff(down(ag.slice_cols(8, d + 8)), ac, "  mhc_pre a"), 0);
    EXPECT_EQ(count_diff(down(hg), hc, "  mhc_pre h_pre"), 0);

    Tensor o = random({t, d}, DType::BF16, 2.f);
    Tensor sc = state.clone(), pc = Tensor::empty({t, 4}, DType::F32), rc = Tensor::empty({t, 16}, DType::F32);
    Tensor pg = poisoned({t, 4}, DType::F32), rg = poisoned({t, 16}, DType::F32);
    cpu_->mhc_post_res({.state = sc, .o = o, .logits = lc, .w = &wc, .h_post = pc, .h_res = rc, .c = c});
    ASSERT_TRUE(cuda::mhc_post_res_fused(
        {.state = state_g, .o = up(o), .logits = logits_g, .w = &wg, .h_post = pg, .h_res = rg, .c = c}, stream()));
    EXPECT_EQ(count_diff(down(state_g), sc, "  mhc_post_res state"), 0);
    EXPECT_EQ(count_diff(down(pg), pc, "  mhc_post_res h_post"), 0);
    EXPECT_EQ(count_diff(down(rg), rc, "  mhc_post_res h_res"), 0);
    // The new rows' sums of squares (MhcPostResParams::ss) from every post kernel, and the next logits
    // through the backend with them given (mhc_logits_pass where D allows, else the GEMM), against the CPU's.
    {
      Tensor s1 = state.clone(), ssc = Tensor::empty({t}, DType::F32);
      cpu_->mhc_post_res({.state = s1, .o = o, .logits = lc, .w = &wc, .c = c, .ss = ssc});
      const cuda::FusedPaths lean{.mhc = true, .scratch = scratch_.get()};
      cuda::FusedPaths ring = lean;
      ring.mhc_post = cuda::MhcPostKernel::kRing;
      const char* names[] = {"reference", "lean", "ring"};
      const cuda::FusedPaths* paths[] = {nullptr, &lean, &ring};
      for (int v = 0; v < 3; ++v) {
        const Tensor sg = up(state), ssg = poisoned({t}, DType::F32);
        cuda::mhc_post_res({.state = sg, .o = up(o), .logits = logits_g, .w = &wg, .c = c, .ss = ssg},
                           stream(), paths[v]);
        EXPECT_EQ(count_diff(down(sg), s1, "  mhc_post_res state, with ss"), 0) << names[v];
        const Tensor ssh = down(ssg);
        double worst = 0;
        for (int64_t r = 0; r < t; ++r) {
          const double a = ssh.data_as<float>()[r], b = ssc.data_as<float>()[r];
          worst = std::isnan(a) ? INFINITY : std::max(worst, std::fabs(a - b) / std::max(std::fabs(b), 1e-30));
        }
        // Two fp32 orders of up to 12,288 positive terms (the CPU's is sequential): 1.8e-5 apart on an H100.
        std::printf("  mhc_post_res ss (%s kernel): max relative |gpu - cpu| %.3g (bound 1e-4)\n", names[v], worst);
        EXPECT_LE(worst, 1e-4) << names[v];
      }
      const Tensor sg = up(s1), ssg = up(ssc);
      Tensor l1 = Tensor::empty({t, 24}, DType::F32), l1g = poisoned({t, 24}, DType::F32);
      cpu_->mhc_logits({.state = s1, .norm_w = norm_w, .phi = phi, .logits = l1, .groups = g});
      const MhcLogitsParams pg1{.state = sg, .norm_w = up(norm_w), .phi = up(phi), .logits = l1g, .groups = g,
                                .ss = ssg};
      gpu_->mhc_logits(pg1);
      const Tensor l1h = down(l1g);
      const MaxErr ge = max_err(l1h, l1);
      std::printf("  logits through the backend, ss given: max |gpu - cpu| = %.3g, max |cpu| = %.3g "
                  "(ratio %.3g, bound 1e-4)\n",
                  ge.err, ge.ref, ge.err / ge.ref);
      EXPECT_LE(ge.err, 1e-4 * ge.ref);
      MhcLogitsParams pg2 = pg1;
      pg2.logits = poisoned({t, 24}, DType::F32);
      gpu_->mhc_logits(pg2);
      EXPECT_EQ(count_diff(down(pg2.logits), l1h, "  logits through the backend, run to run"), 0);
    }
    // The other post kernels (MhcPostKernel) on a state with NaNs (payloads, signs) and infinities
    // planted: the first ring kernel's bytes (not the CPU's: GPU arithmetic returns the canonical NaN).
    Tensor sn = state.clone();
    auto* bits = static_cast<uint16_t*>(sn.data());
    const uint16_t planted[] = {0x7fc1, 0xffa5, 0x7f80, 0xff80, 0x7f81};
    for (int64_t i = 0; i < t; i += 7) bits[i * vw + (i * 13) % vw] = planted[(i / 7) % 5];
    const Tensor o_g = up(o);
    auto post_nan = [&](cuda::MhcPostKernel k) {
      const Tensor sk = up(sn);
      EXPECT_TRUE(cuda::mhc_post_res_fused({.state = sk, .o = o_g, .logits = logits_g, .w = &wg, .c = c}, stream(), k));
      return down(sk);
    };
    const Tensor ring_nan = post_nan(cuda::MhcPostKernel::kRing);
    EXPECT_EQ(count_diff(post_nan(cuda::MhcPostKernel::kLean), ring_nan, "  mhc_post_res, NaN planted, lean vs ring"),
              0);
  }
}

// mhc_post_res with the next branch's logits (MhcPostResParams::next) in one pass (mhc_post_logits_fused)
// against the CPU's mhc_post_res, then mhc_logits: the state, h_post and h_res bit for bit, the new rows'
// sums of squares within 1e-4 relative, the logits within the fused logits' bound; the DiT's aliasing
// (next.logits = logits) and a second run give the same bytes; a token's logits are the same bytes with
// fewer tokens beside it (the first rows alone); the checked entry point without the fast paths (the
// update, then the logits op) within the same bound. D = 200 cannot take the one-pass kernel.
TEST_F(CudaFusedTest, MhcPostResWithNextLogitsInOnePass) {
  for (const MhcCase mc : {MhcCase{127, 256, 1}, MhcCase{300, 3072, 3}, MhcCase{1000, 3072, 1},
                           MhcCase{333, 512, 3}, MhcCase{9, 200, 1}}) {
    const int64_t t = mc.t, d = mc.d, vw = 4 * d;
    const auto groups_of = [&](int64_t rows) {
      Groups g = Groups::single(rows);
      if (mc.groups == 3) g.cu = {0, rows / 2, rows * 5 / 6, rows}, g.count = 3;
      return g;
    };
    const Groups g = groups_of(t);
    std::printf("[D=%lld T=%lld groups=%d]\n", static_cast<long long>(d), static_cast<long long>(t), mc.groups);
    const float c = 1.0f / std::sqrt(static_cast<float>(vw));
    const Tensor state = random({t, vw}, DType::BF16, 1.5f), o = random({t, d}, DType::BF16, 2.f);
    const Tensor logits = random({t, 24}, DType::F32, 2.f), norm_w = random({mc.groups * vw}, DType::F32, 0.1f);
    const Tensor phi = random({vw, 24}, DType::F32, 1.f);
    MhcBranchWeights wc{.alpha_post = values({1}, {1.1f}), .alpha_res = values({1}, {2.5f}),
                        .bias_post = random({4}, DType::F32, 0.5f), .bias_res = random({4, 4}, DType::F32, 1.f)};
    MhcBranchWeights wg{.alpha_post = up(wc.alpha_post), .alpha_res = up(wc.alpha_res),
                        .bias_post = up(wc.bias_post), .bias_res = up(wc.bias_res)};
    Tensor sc = state.clone(), pc = Tensor::empty({t, 4}, DType::F32), rc = Tensor::empty({t, 16}, DType::F32);
    Tensor ssc = Tensor::empty({t}, DType::F32), lc = Tensor::empty({t, 24}, DType::F32);
    cpu_->mhc_post_res({.state = sc, .o = o, .logits = logits, .w = &wc, .h_post = pc, .h_res = rc, .c = c, .ss = ssc});
    cpu_->mhc_logits({.state = sc, .norm_w = norm_w, .phi = phi, .logits = lc, .groups = g});
    const Tensor nw_g = up(norm_w), phi_g = up(phi);
    struct Out {
      Tensor state, h_post, h_res, ss, logits;
      bool fused = true;
    };
    // The first `rows` tokens; fast: the one-pass kernel itself (nullptr: the checked entry point without fast paths).
    const auto run = [&](int64_t rows, bool alias, bool fast) {
      const Tensor sg = up(state.slice_rows(0, rows).clone()), lin = up(logits.slice_rows(0, rows).clone());
      const Tensor pg = poisoned({rows, 4}, DType::F32), rg = poisoned({rows, 16}, DType::F32);
      const Tensor ssg = poisoned({rows}, DType::F32), lg = alias ? lin : poisoned({rows, 24}, DType::F32);
      const MhcPostResParams p{.state = sg, .o = up(o.slice_rows(0, rows).clone()), .logits = lin, .w = &wg,
                               .h_post = pg, .h_res = rg, .c = c, .ss = ssg,
                               .next = {.norm_w = nw_g, .phi = phi_g, .logits = lg, .groups = groups_of(rows)}};
      Out out;
      if (fast)
        out.fused = cuda::mhc_post_logits_fused(p, *scratch_, stream());
      else
        cuda::mhc_post_res(p, stream(), nullptr);
      out.state = down(sg), out.h_post = down(pg), out.h_res = down(rg), out.ss = down(ssg), out.logits = down(lg);
      return out;
    };
    const auto check = [&](const Out& r, const char* what) {
      EXPECT_EQ(count_diff(r.state, sc, "  state"), 0) << what;
      EXPECT_EQ(count_diff(r.h_post, pc, "  h_post"), 0) << what;
      EXPECT_EQ(count_diff(r.h_res, rc, "  h_res"), 0) << what;
      double worst = 0;
      for (int64_t i = 0; i < t; ++i) {
        const double a = r.ss.data_as<float>()[i], b = ssc.data_as<float>()[i];
        worst = std::isnan(a) ? INFINITY : std::max(worst, std::fabs(a - b) / std::max(std::fabs(b), 1e-30));
      }
      EXPECT_LE(worst, 1e-4) << what;
      const MaxErr le = max_err(r.logits, lc);
      std::printf("  %s: ss max relative |gpu - cpu| %.3g (bound 1e-4); logits max |gpu - cpu| = %.3g, max |cpu| = "
                  "%.3g (ratio %.3g, bound 1e-4)\n", what, worst, le.err, le.ref, le.err / le.ref);
      EXPECT_LE(le.err, 1e-4 * le.ref) << what;
    };
    check(run(t, false, false), "update, then the logits op");
    const Out one = run(t, false, true);
    EXPECT_EQ(one.fused, d % 128 == 0);
    if (!one.fused) continue;
    check(one, "one pass");
    const Out aliased = run(t, true, true), again = run(t, false, true);
    EXPECT_EQ(count_diff(aliased.logits, one.logits, "  one pass, next.logits = logits"), 0);
    EXPECT_EQ(count_diff(aliased.state, one.state, "  one pass, next.logits = logits: state"), 0);
    EXPECT_EQ(count_diff(again.logits, one.logits, "  one pass, run to run"), 0);
    // The pass without the update on the new state: the one pass's logits, byte for byte (so --offload
    // layerwise, where a layer's post + residual cannot reach the next layer's weights, gives the same bytes).
    {
      const Tensor lg = poisoned({t, 24}, DType::F32);
      const MhcLogitsParams lp{.state = up(one.state), .norm_w = nw_g, .phi = phi_g, .logits = lg, .groups = g};
      ASSERT_TRUE(cuda::mhc_logits_pass(lp, *scratch_, stream()));
      EXPECT_EQ(count_diff(down(lg), one.logits, "  mhc_logits_pass on the new state"), 0);
    }
    // Through the backend (its fast paths, MAGI2_MHC_KERNEL's default): the one-pass kernel's bytes.
    {
      const Tensor sg = up(state), lin = up(logits);
      gpu_->mhc_post_res({.state = sg, .o = up(o), .logits = lin, .w = &wg, .c = c,
                          .next = {.norm_w = nw_g, .phi = phi_g, .logits = lin, .groups = g}});
      if (cuda::fused_selected("MAGI2_MHC_KERNEL")) {
        EXPECT_EQ(count_diff(down(lin), one.logits, "  through the backend"), 0);
      }
    }
    if (mc.groups == 1) {  // the first rows alone (a partial last tile): their logits' bytes do not move
      const int64_t rows = t / 3 + 5;
      const Out part = run(rows, false, true);
      EXPECT_EQ(count_diff(part.logits, one.logits.slice_rows(0, rows).clone(), "  the first rows alone"), 0);
    }
  }
}

// ---- router ---------------------------------------------------------------------

// mhc_pre with the branch's pre-norm (MhcPreParams::norm) against the CPU's mhc_pre + rms_norm: with and
// without the branch input kept, with and without FP8 rows, one and three groups; D = 4096 takes the
// unfused path on the GPU (8 rows exceed 48 KB of shared memory); D = 200 ends in a partial column step.
TEST_F(CudaFusedTest, MhcPreWithPreNormIsPreThenNormBitForBit) {
  const cuda::FusedPaths fast{.mhc = true, .scratch = scratch_.get()};
  for (const MhcCase mc : {MhcCase{300, 3072, 3}, MhcCase{77, 256, 1}, MhcCase{40, 4096, 3}, MhcCase{33, 200, 1}}) {
    const int64_t t = mc.t, d = mc.d, vw = 4 * d;
    Groups g = Groups::single(t);
    if (mc.groups == 3) g.cu = {0, t / 3, t * 2 / 3, t}, g.count = 3;
    const bool rows8 = d % kFp8ActGroup == 0;
    std::printf("[D=%lld T=%lld groups=%d%s]\n", static_cast<long long>(d), static_cast<long long>(t), mc.groups,
                rows8 ? ", FP8 rows" : "");
    const float c = 1.0f / std::sqrt(static_cast<float>(vw));
    const Tensor state = random({t, vw}, DType::BF16, 1.5f), logits = random({t, 24}, DType::F32, 2.f);
    const Tensor nw = random({mc.groups * d}, DType::F32, 0.2f);
    MhcBranchWeights wc{.alpha_pre = values({1}, {0.8f}), .bias_pre = random({4}, DType::F32, 0.5f)};
    MhcBranchWeights wg{.alpha_pre = up(wc.alpha_pre), .bias_pre = up(wc.bias_pre)};
    // The reference: the two ops on the CPU.
    Tensor ac = Tensor::empty({t, d}, DType::BF16), yc = Tensor::empty({t, d}, DType::BF16);
    Fp8Rows yc8;
    if (rows8) yc8 = {Tensor::empty({t, d}, DType::F8E4M3), Tensor::empty({t, d / kFp8ActGroup}, DType::F32)};
    cpu_->mhc_pre({.state = state, .logits = logits, .w = &wc, .a = ac, .c = c});
    cpu_->rms_norm({.x = ac, .w = nw, .y = yc, .groups = g, .y8 = yc8});
    // The CPU's own fused form gives the same bytes.
    {
      Tensor y1 = Tensor::empty({t, d}, DType::BF16);
      cpu_->mhc_pre({.state = state, .logits = logits, .w = &wc, .c = c, .norm = {.w = nw, .y = y1, .groups = g}});
      EXPECT_EQ(count_diff(y1, yc, "  cpu fused y"), 0);
    }
    const Tensor state_g = up(state), logits_g = up(logits), nw_g = up(nw);
    for (const bool keep_a : {false, true})
      for (const bool use_fast : {true, false}) {
        Tensor ag = keep_a ? poisoned({t, d}, DType::BF16) : Tensor(), yg = poisoned({t, d}, DType::BF16);
        Fp8Rows yg8;
        if (rows8) yg8 = {poisoned({t, d}, DType::F8E4M3), poisoned({t, d / kFp8ActGroup}, DType::F32)};
        cuda::mhc_pre({.state = state_g, .logits = logits_g, .w = &wg, .a = ag, .c = c,
                       .norm = {.w = nw_g, .y = yg, .groups = g, .y8 = yg8}},
                      stream(), use_fast ? &fast : nullptr);
        const char* how = use_fast ? (keep_a ? "  fast, a kept" : "  fast") : (keep_a ? "  plain, a kept" : "  plain");
        std::printf("%s\n", how);
        if (keep_a) {
          EXPECT_EQ(count_diff(down(ag), ac, "    a"), 0);
        }
        EXPECT_EQ(count_diff(down(yg), yc, "    y"), 0);
        if (rows8) {
          EXPECT_EQ(count_diff(down(yg8.q), yc8.q, "    y8 e4m3"), 0);
          EXPECT_EQ(count_diff(down(yg8.scale), yc8.scale, "    y8 scales"), 0);
        }
      }
  }
}

TEST_F(CudaFusedTest, RouterSelectsAsTheReferenceWhereTheMarginIsClear) {
  for (const RouteCase rc : {RouteCase{1000, 256, 12, 256, 6}, RouteCase{77, 64, 4, 64, 4}}) {
    const int64_t t = rc.t;
    const int mh = rc.mh, ne = rc.ne, k = rc.k;
    // Head 0: zero gate rows (every logit exactly 0) and tied biases; head 1: two NaN biases;
    // forced: distinct experts, not in score order.
    const auto [r, gate, bias, forced, r_g, gate_g, bias_g, forced_g] = route_inputs(rc, 7);
    for (int mode = 0; mode < 3; ++mode) {  // normalised, not normalised, forced
      const bool normalize = mode != 1, force = mode == 2;
      const auto [ic, wc, mc, ig, wg, mg] = route_outputs(mh, t, k);
      cpu_->moe_route({.r = r, .gate = gate, .bias = bias, .idx = ic, .weight = wc,
                       .forced_idx = force ? forced : Tensor(), .margin = mc, .num_heads = mh, .num_experts = ne,
                       .top_k = k, .route_scale = 4.9f, .normalize = normalize});
      ASSERT_TRUE(cuda::moe_route_fused({.r = r_g, .gate = gate_g, .bias = bias_g, .idx = ig, .weight = wg,
                                         .forced_idx = force ? forced_g : Tensor(), .margin = mg, .num_heads = mh,
                                         .num_experts = ne, .top_k = k, .route_scale = 4.9f, .normalize = normalize},
                                        *scratch_, stream()));
      const Tensor ih = down(ig), wh = down(wg), mgh = down(mg);
      int64_t clear = 0, same = 0, exact_bad = 0, weight_bad = 0;
      double max_margin_err = 0;
      for (int64_t i = 0; i < mh * t; ++i) {
        const int32_t* a = ic.data_as<int32_t>() + i * k;
        const int32_t* b = ih.data_as<int32_t>() + i * k;
        const float* wa = wc.data_as<float>() + i * k;
        const float* wb = wh.data_as<float>() + i * k;
        const bool head0 = i < t;
        if (head0 || force) {  // exact logits (head 0) or forced indices: the same ids in the same slots
          for (int j = 0; j < k; ++j) exact_bad += a[j] != b[j];
          if (head0)
            for (int j = 0; j < k; ++j) exact_bad += wa[j] != wb[j];
        }
        const float m = mc.data_as<float>()[i];
        if (!(m > 0.01f) && !force) continue;
        ++clear;
        bool ok = true;
        for (int j = 0; j < k && ok; ++j) {
          const int32_t* hit = std::find(b, b + k, a[j]);
          ok = hit != b + k;
          if (ok && std::fabs(wb[hit - b] - wa[j]) > 3e-5f * std::fabs(wa[j]) + 1e-6f) ++weight_bad;
        }
        same += ok;
        if (!force) max_margin_err = std::max(max_margin_err, std::fabs(static_cast<double>(mgh.data_as<float>()[i]) - m));
      }
      std::printf("  %s: %lld of %lld (head, token) pairs with margin > 0.01, %lld select the same experts; "
                  "%lld weights off; max margin error %.3g\n",
                  force ? "forced" : normalize ? "normalised" : "not normalised", static_cast<long long>(clear),
                  static_cast<long long>(mh * t), static_cast<long long>(same), static_cast<long long>(weight_bad),
                  max_margin_err);
      EXPECT_EQ(same, clear);
      EXPECT_EQ(weight_bad, 0);
      EXPECT_EQ(exact_bad, 0);
      EXPECT_GT(clear, mh * t / 4);  // the comparison covered a good share of the pairs
      EXPECT_LE(max_margin_err, 1e-4);
    }
  }
}

// The fused router's two selections (fused_kernels.h RouteSelect) on the same
// tensor-core logits (kFiltered computes them transposed, with the same bits):
// idx, weights and margin bit for bit (E = 32 runs kFiltered as kWarp). Planted
// beside the random heads: head 0 every logit 0 with 5 bias levels (~51-way
// ties: past the candidate cap, the exact fallback), head 1 NaN biases, head 2
// three experts with the same gate row and bias (exact ties among candidates),
// head 3 a NaN in one token's r (a row of NaN scores), head 4 every logit 0
// with 4-way tied bias levels (ties inside the cap), head 5 a NaN gate row (a
// NaN score in every row), head 6 an infinite bias (no bound: the whole head
// falls back), head 7 logits ~ +-100 (saturated sigmoids), and a token with
// r = 0.
void plant_select_cases(Tensor& r, Tensor& gate, Tensor& bias, int mh, int ne, int64_t dh) {
  float* g = gate.data_as<float>();
  float* b = bias.data_as<float>();
  auto row = [&](int h, int e) { return g + (static_cast<int64_t>(h) * ne + e) * dh; };
  if (mh > 2) {
    for (int e = 11; e <= 12; ++e) {
      std::copy(row(2, 10), row(2, 10) + dh, row(2, e));
      b[2 * ne + e] = b[2 * ne + 10];
    }
    for (int64_t i = 0; i < dh; ++i) row(2, 10)[i] *= 3.f, row(2, 11)[i] *= 3.f, row(2, 12)[i] *= 3.f;
  }
  if (mh > 3) r.data_as<uint16_t>()[5 * r.size(1) + 3 * dh] = 0x7fc0;  // bf16 NaN, token 5, head 3
  if (mh > 4)
    for (int e = 0; e < ne; ++e) {
      std::fill(row(4, e), row(4, e) + dh, 0.f);
      b[4 * ne + e] = 0.01f * static_cast<float>(e % (ne / 4));
    }
  if (mh > 5) row(5, 7)[0] = NAN;
  if (mh > 6) b[6 * ne + 3] = INFINITY;
  if (mh > 7)
    for (int e = 0; e < ne; ++e)
      for (int64_t i = 0; i < dh; ++i) row(7, e)[i] *= 100.f;
  std::fill(r.data_as<uint16_t>() + 9 * r.size(1), r.data_as<uint16_t>() + 10 * r.size(1), uint16_t{0});
}

TEST_F(CudaFusedTest, RouterFilteredSelectionEqualsTheWarpSelectionBitForBit) {
  for (const RouteCase rc : {RouteCase{1000, 256, 12, 256, 6}, RouteCase{77, 64, 4, 64, 4},
                             RouteCase{200, 32, 8, 32, 7}, RouteCase{130, 64, 8, 128, 1},
                             RouteCase{90, 96, 8, 192, 5}}) {
    const int64_t t = rc.t, dh = rc.dh;
    const int mh = rc.mh, ne = rc.ne, k = rc.k;
    const auto [r, gate, bias, forced, r_g, gate_g, bias_g, forced_g] =
        route_inputs(rc, 11, [&](Tensor& rr, Tensor& gg, Tensor& bb) { plant_select_cases(rr, gg, bb, mh, ne, dh); });
    for (int mode = 0; mode < 3; ++mode) {  // normalised, not normalised, forced
      const bool normalize = mode != 1, force = mode == 2;
      std::printf("  %s\n", force ? "forced" : normalize ? "normalised" : "not normalised");
      const auto [i_ref, w_ref, m_ref, ig, wg, mg] = route_outputs(mh, t, k);
      const auto [i_ref2, w_ref2, m_ref2, iw, ww, mw] = route_outputs(mh, t, k);
      MoeRouteParams p{.r = r_g, .gate = gate_g, .bias = bias_g, .idx = ig, .weight = wg,
                       .forced_idx = force ? forced_g : Tensor(), .margin = mg, .num_heads = mh, .num_experts = ne,
                       .top_k = k, .route_scale = 4.9f, .normalize = normalize};
      ASSERT_TRUE(cuda::moe_route_fused(p, *scratch_, stream(), cuda::RouteSelect::kFiltered));
      p.idx = iw, p.weight = ww, p.margin = mw;
      ASSERT_TRUE(cuda::moe_route_fused(p, *scratch_, stream(), cuda::RouteSelect::kWarp));
      EXPECT_EQ(count_diff(down(ig), down(iw), "    idx"), 0);
      EXPECT_EQ(count_diff(down(wg), down(ww), "    weight"), 0);
      EXPECT_EQ(count_diff(down(mg), down(mw), "    margin"), 0);
    }
  }
}

// dev::sigmoid_fast_f32 (routed experts' SwiGLU7, the router's filter bound)
// is the .ftz SFU form; it must give the bits of the __fdividef form it
// replaced on every input, so neither kernel's bytes moved.
TEST_F(CudaFusedTest, SigmoidFastIsTheFdividefFormBitForBit) {
  if (!gpu_) GTEST_SKIP() << "no CUDA device";
  EXPECT_EQ(test::sigmoid_fast_mismatches(stream()), 0u);
}

}  // namespace
}  // namespace magi2
