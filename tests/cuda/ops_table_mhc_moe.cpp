// The mHC and MoE rows of the backend op table (ops_table.h): the mHC ops
// (4 streams at D = 3072 and at a small width, on the backend's kernels and on
// the opt-in fused ones), the router (12 heads x 256 experts, d_head 256,
// top-6; natural and forced routing) and the routed experts in bf16 and FP8
// W8A8. Tolerances are the ones stated by
// tests/cuda/test_cuda_{mhc_moe,moe_grouped,fused,fp8_w8a8}.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/backend_cuda.h"
#include "cuda/fused_kernels.h"
#include "cuda/mhc_moe.h"
#include "cuda_fixture.h"
#include "ops/fp8_blocks.h"
#include "ops/numerics.h"
#include "ops_table.h"

namespace magi2::test {

namespace {

constexpr DType kBf16 = DType::BF16;
constexpr DType kF32 = DType::F32;

/// Routing [mh, t, k] i32: distinct experts per (head, token), a repeated one every 17th pair.
Tensor routing(CaseBuilder& b, int mh, int64_t t, int ne, int k) {
  Tensor idx = Tensor::empty({mh, t, k}, DType::I32);
  for (int64_t i = 0; i < mh * t; ++i) {
    const std::vector<int32_t> p = permutation(b, ne);
    std::copy(p.begin(), p.begin() + k, idx.data_as<int32_t>() + i * k);
    if (i % 17 == 5) idx.data_as<int32_t>()[i * k + 1] = idx.data_as<int32_t>()[i * k];
  }
  return idx;
}

/// The mHC inputs at width d: state [t, 4d], logits [t, 24] at the scale of n * phi, branch weights.
struct MhcInputs {
  Tensor state, logits;
  std::shared_ptr<MhcBranchWeights> w;
  float c;
};
MhcInputs mhc_inputs(CaseBuilder& b, int64_t t, int64_t d, bool state_inout) {
  const float c = 1.0f / std::sqrt(static_cast<float>(4 * d)), l = 2.f / c;
  Tensor state = b.uniform({t, 4 * d}, kBf16, -3.f, 3.f);
  auto w = std::make_shared<MhcBranchWeights>(MhcBranchWeights{
      .alpha_pre = b.in(b.uniform({1}, kF32, 0.3f, 1.5f)), .alpha_post = b.in(b.uniform({1}, kF32, 0.3f, 1.5f)),
      .alpha_res = b.in(b.uniform({1}, kF32, 0.3f, 3.f)), .bias_pre = b.in(b.uniform({4}, kF32, -1.f, 1.f)),
      .bias_post = b.in(b.uniform({4}, kF32, -1.f, 1.f)), .bias_res = b.in(b.uniform({4, 4}, kF32, -2.f, 2.f))});
  Tensor logits = b.in(b.uniform({t, 24}, kF32, -l, l));
  return {state_inout ? b.inout(state) : b.in(state), logits, w, c};
}

// The opt-in fast kernels (src/cuda/fused_kernels.h) for entries marked
// "fused": on the CUDA backend they run whatever MAGI2_MHC_KERNEL and
// MAGI2_ROUTER_KERNEL say (nullptr elsewhere: the backend's own op).
struct FastPaths {
  std::shared_ptr<cuda::SplitScratch> scratch;
  cuda::FusedPaths paths;
};
std::shared_ptr<FastPaths> fast_paths(Backend& be, bool fused) {
  if (!fused || be.device() != Device::CUDA) return nullptr;
  auto f = std::make_shared<FastPaths>();
  f->scratch = split_scratch_on(be);
  f->paths = {.mhc = true, .router = true, .scratch = f->scratch.get()};
  return f;
}
cudaStream_t stream_of(Backend& be) { return static_cast<cudaStream_t>(cuda_stream_of(be)); }

// fused: the entries run the fast kernels (named so in the shape column); the
// plain entries follow the switches, so the logits' tolerance follows them too.
std::vector<OpEntry> mhc_entries(int64_t t, int64_t d, int groups, bool fused) {
  const std::string s = std::to_string(t) + " x 4x" + std::to_string(d) + (groups == 3 ? ", 3 groups" : "") +
                        (fused ? ", fused kernels" : "");
  const Groups g = groups == 3 ? three_groups(t / 2, t * 5 / 6, t) : Groups::single(t);
  // bf16 tensor-core logits: fp32 rounding noise, not the CPU's bits (test_cuda_fused.cpp).
  const Tolerance logits_tol =
      fused || cuda::fused_selected("MAGI2_MHC_KERNEL") ? rel_rms(1e-5, 1e-4, true) : exact();
  std::vector<OpEntry> e;
  e.push_back({"mhc_logits", s, logits_tol, 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 Tensor state = b.in(b.uniform({t, 4 * d}, kBf16, -3.f, 3.f));
                 Tensor nw = b.in(b.uniform({groups * 4 * d}, kF32, -0.2f, 0.2f));
                 Tensor phi = b.in(b.uniform({4 * d, 24}, kF32, -1.7f, 1.7f)), lg = b.out({t, 24}, kF32);
                 const MhcLogitsParams p{.state = state, .norm_w = nw, .phi = phi, .logits = lg, .groups = g};
                 return b.done([&be, p, f = fast_paths(be, fused)] {
                   f ? cuda::mhc_logits(p, stream_of(be), &f->paths) : be.mhc_logits(p);
                 });
               }});
  e.push_back({"mhc_pre", s, exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const MhcInputs m = mhc_inputs(b, t, d, false);
                 const MhcPreParams p{.state = m.state, .logits = m.logits, .w = m.w.get(),
                                      .a = b.out_cols(t, d + 8, kBf16, 8, d + 8), .h_pre = b.out({t, 4}, kF32), .c = m.c};
                 return b.done([&be, p, w = m.w, f = fast_paths(be, fused)] {
                   f ? cuda::mhc_pre(p, stream_of(be), &f->paths) : be.mhc_pre(p);
                 });
               }});
  // With the branch's pre-norm and its FP8 rows (MhcPreParams::norm, how the DiT runs it): the branch input
  // stays on chip (a omitted), y, the e4m3 rows and their scales bit-exact with mhc_pre + rms_norm.
  if (d % kFp8ActGroup == 0)
    e.push_back({"mhc_pre", s + " + pre-norm (3 groups), FP8 rows", exact(), 0, [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   const MhcInputs m = mhc_inputs(b, t, d, false);
                   Tensor nw = b.in(b.uniform({3 * d}, kF32, -0.17f, 0.17f));
                   const Fp8Rows y8{b.out({t, d}, DType::F8E4M3), b.out({t, d / kFp8ActGroup}, kF32)};
                   const MhcPreParams p{.state = m.state, .logits = m.logits, .w = m.w.get(),
                                        .h_pre = b.out({t, 4}, kF32), .c = m.c,
                                        .norm = {.w = nw, .y = b.out({t, d}, kBf16),
                                                 .groups = three_groups(t / 2, t * 3 / 4, t), .y8 = y8}};
                   return b.done([&be, p, w = m.w, f = fast_paths(be, fused)] {
                     f ? cuda::mhc_pre(p, stream_of(be), &f->paths) : be.mhc_pre(p);
                   });
                 }});
  e.push_back({"mhc_post_res", s + ", state in place", exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const MhcInputs m = mhc_inputs(b, t, d, true);
                 Tensor o = b.in(b.uniform({t, d}, kBf16, -4.f, 4.f));
                 const MhcPostResParams p{.state = m.state, .o = o, .logits = m.logits, .w = m.w.get(),
                                          .h_post = b.out({t, 4}, kF32), .h_res = b.out({t, 16}, kF32), .c = m.c};
                 return b.done([&be, p, w = m.w, f = fast_paths(be, fused)] {
                   f ? cuda::mhc_post_res(p, stream_of(be), &f->paths) : be.mhc_post_res(p);
                 });
               }});
  // With the next branch's logits of the new state (MhcPostResParams::next, as the DiT calls it; one pass on
  // the fused path: mhc_post_logits.cu): both outputs held to the logits' tolerance here (the state's bytes
  // are test_cuda_fused's MhcPostResWithNextLogitsInOnePass).
  e.push_back({"mhc_post_res", s + ", + next logits", logits_tol, 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const MhcInputs m = mhc_inputs(b, t, d, true);
                 Tensor o = b.in(b.uniform({t, d}, kBf16, -4.f, 4.f));
                 Tensor nw = b.in(b.uniform({groups * 4 * d}, kF32, -0.2f, 0.2f));
                 Tensor phi = b.in(b.uniform({4 * d, 24}, kF32, -1.7f, 1.7f));
                 const MhcPostResParams p{.state = m.state, .o = o, .logits = m.logits, .w = m.w.get(), .c = m.c,
                                          .next = {.norm_w = nw, .phi = phi, .logits = b.out({t, 24}, kF32),
                                                   .groups = g}};
                 return b.done([&be, p, w = m.w, f = fast_paths(be, fused)] {
                   f ? cuda::mhc_post_res(p, stream_of(be), &f->paths) : be.mhc_post_res(p);
                 });
               }});
  return e;
}

// The fused router's weights and margins carry its tensor-core logits' fp32
// noise; natural routing may then differ where the margin is within that noise
// (test_cuda_fused.cpp checks the selection where the margin exceeds 0.01).
OpEntry moe_route_entry(int64_t t, int64_t dh, int mh, int ne, int k, bool forced, bool fused = false) {
  const std::string s = std::to_string(t) + " tokens, " + std::to_string(mh) + " heads x " + std::to_string(ne) +
                        " experts, d_head " + std::to_string(dh) + ", top-" + std::to_string(k) +
                        (forced ? ", forced" : "") + (fused ? ", fused kernel" : "");
  const bool fast = (fused || cuda::fused_selected("MAGI2_ROUTER_KERNEL")) && dh % 32 == 0 && ne % 32 == 0;
  return {"moe_route", s, fast ? rel_rms(1e-4, 1e-4) : exact(), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const float a = 1.7f / std::sqrt(static_cast<float>(dh));
            Tensor r = b.in(b.uniform({t, mh * dh}, kBf16, -2.f, 2.f));
            Tensor gate = b.in(b.uniform({mh * ne, dh}, kF32, -a, a));
            Tensor bias = b.in(b.uniform({mh * ne}, kF32, -0.5f, 0.5f));
            Tensor fi = forced ? b.in(routing(b, mh, t, ne, k)) : Tensor();
            const MoeRouteParams p{.r = r, .gate = gate, .bias = bias, .idx = b.out({mh, t, k}, DType::I32),
                                   .weight = b.out({mh, t, k}, kF32), .forced_idx = fi, .margin = b.out({mh, t}, kF32),
                                   .num_heads = mh, .num_experts = ne, .top_k = k, .route_scale = 4.9f};
            return b.done([&be, p, f = fast_paths(be, fused)] {
              f ? cuda::moe_route(p, stream_of(be), &f->paths) : be.moe_route(p);
            });
          }};
}

OpEntry moe_experts_entry(int64_t t, int64_t dh, int64_t de, int mh, int ne, int k) {
  const std::string s = std::to_string(t) + " tokens, " + std::to_string(mh) + " heads x " + std::to_string(ne) +
                        " experts, " + std::to_string(dh) + " -> " + std::to_string(de) + ", top-" + std::to_string(k);
  const double flops = 6.0 * static_cast<double>(t * mh * k) * static_cast<double>(dh * de);
  return {"moe_experts", s, rel_rms(2e-2, 0.05, true), flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            // G and U of standard deviation ~3 (both cross the +-7 clamps), as the grouped-GEMM parity test.
            const float a = 5.2f / std::sqrt(static_cast<float>(dh)), c = 1.47f / std::sqrt(static_cast<float>(de));
            Tensor r = b.in(b.uniform({t, mh * dh}, kBf16, -1.4f, 1.4f));
            Tensor wg = b.in(b.uniform({mh * ne, dh, de}, kBf16, -a, a));
            Tensor wu = b.in(b.uniform({mh * ne, dh, de}, kBf16, -a, a));
            Tensor wd = b.in(b.uniform({mh * ne, de, dh}, kBf16, -c, c));
            Tensor idx = b.in(routing(b, mh, t, ne, k)), w = b.in(b.uniform({mh, t, k}, kF32, 0.1f, 1.5f));
            const MoeExpertsParams p{.r = r, .w_gate = wg, .w_up = wu, .w_down = wd, .idx = idx, .weight = w,
                                     .out = b.out({t, mh * dh}, kBf16), .num_heads = mh, .num_experts = ne,
                                     .top_k = k};
            return b.done([&be, p] { be.moe_experts(p); });
          }};
}

// FP8 routed experts computed as W8A8 (docs/fp8.md; the fused FP8 kernel):
// the same inputs as moe_experts_entry with the banks block-quantised on the
// host. Tolerance of test_cuda_fp8_w8a8.cpp (the tensor cores' summation order
// and the SFU sigmoid can move a Z element across an e4m3 rounding boundary,
// one e4m3 step of that element).
// rows8: out's FP8 rows too (MoeExpertsParams::out8, written by the combine).
OpEntry moe_experts_w8a8_entry(int64_t t, int64_t dh, int64_t de, int mh, int ne, int k, bool rows8 = false) {
  const std::string s = std::to_string(t) + " tokens, " + std::to_string(mh) + " heads x " + std::to_string(ne) +
                        " experts, " + std::to_string(dh) + " -> " + std::to_string(de) + ", top-" +
                        std::to_string(k) + ", FP8 W8A8" + (rows8 ? " + FP8 rows" : "");
  const double flops = 6.0 * static_cast<double>(t * mh * k) * static_cast<double>(dh * de);
  return {"moe_experts", s, rel_rms(3e-2, 0.08, true), flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const float a = 5.2f / std::sqrt(static_cast<float>(dh)), c = 1.47f / std::sqrt(static_cast<float>(de));
            Tensor r = b.in(b.uniform({t, mh * dh}, kBf16, -1.4f, 1.4f));
            const Fp8Blocks wg = quantize_fp8_blocks(b.uniform({mh * ne, dh, de}, kBf16, -a, a), "W_gate");
            const Fp8Blocks wu = quantize_fp8_blocks(b.uniform({mh * ne, dh, de}, kBf16, -a, a), "W_up");
            const Fp8Blocks wd = quantize_fp8_blocks(b.uniform({mh * ne, de, dh}, kBf16, -c, c), "W_down");
            Tensor idx = b.in(routing(b, mh, t, ne, k)), w = b.in(b.uniform({mh, t, k}, kF32, 0.1f, 1.5f));
            const MoeExpertsParams p{.r = r, .w_gate = b.in(wg.q), .w_up = b.in(wu.q), .w_down = b.in(wd.q),
                                     .w_gate_scale = b.in(wg.scale_inv), .w_up_scale = b.in(wu.scale_inv),
                                     .w_down_scale = b.in(wd.scale_inv), .idx = idx, .weight = w,
                                     .out = b.out({t, mh * dh}, kBf16), .num_heads = mh, .num_experts = ne,
                                     .top_k = k, .fp8_compute = Fp8Compute::W8A8,
                                     .out8 = rows8 ? Fp8Rows{b.out({t, mh * dh}, DType::F8E4M3),
                                                             b.out({t, mh * dh / kFp8ActGroup}, kF32)}
                                                   : Fp8Rows{}};
            return b.done([&be, p] { be.moe_experts(p); });
          }};
}

}  // namespace

std::vector<OpEntry> mhc_moe_op_entries() {
  std::vector<OpEntry> t;
  for (const bool fused : {false, true}) {
    for (OpEntry& e : mhc_entries(2048, 3072, 3, fused)) t.push_back(std::move(e));
    for (OpEntry& e : mhc_entries(127, 256, 1, fused)) t.push_back(std::move(e));
  }

  t.push_back(moe_route_entry(2048, 256, 12, 256, 6, false));
  t.push_back(moe_route_entry(127, 64, 4, 16, 4, false));
  t.push_back(moe_route_entry(127, 64, 4, 16, 4, true));
  t.push_back(moe_route_entry(2048, 256, 12, 256, 6, true, true));

  t.push_back(moe_experts_entry(127, 64, 64, 4, 16, 4));
  t.push_back(moe_experts_entry(200, 256, 1280, 2, 16, 6));
  t.push_back(moe_experts_entry(2048, 256, 1280, 2, 16, 6));
  t.push_back(moe_experts_w8a8_entry(200, 256, 1280, 2, 16, 6));
  t.push_back(moe_experts_w8a8_entry(200, 256, 1280, 2, 16, 6, true));
  return t;
}

}  // namespace magi2::test
