// FP8 routed experts (W8A16 and W8A8, docs/fp8.md) at the release width on
// the CPU reference backend: one MoE layer's routed experts (12 heads x 256
// experts, top-6, d_head 256, d_expert 1280) with seeded random weights of the
// tiny model's recipe (random_dit_tensor), natural routing from a random
// router, bf16 banks vs the same banks quantised to e4m3 with 128 x 128 block
// scales, computed as W8A16 and as W8A8. Prints the errors of the FP8 outputs
// against the bf16 one and W8A8 against W8A16 (docs/parity.md records them). Not a test: a release-width bank is 3 x 2 GB of bf16.
//   build/bench/fp8_accuracy [tokens=64] [threads=0]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "engine/tiny_model.h"
#include "models/magi2_dit/config.h"
#include "models/magi2_dit/weights.h"
#include "ops/fp8_blocks.h"
#include "ops/ops.h"

using namespace magi2;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int64_t t = argc > 1 ? std::atoll(argv[1]) : 64;
    const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
    MAGI2_CHECK(t >= 1 && t <= 65536, "tokens must be in [1, 65536], got ", t);
    const DitArch a = Magi2Config::release().arch;
    const int mh = a.moe_num_heads, ne = a.moe_num_experts, k = a.moe_top_k;
    const int64_t dh = a.moe_head_dim(), de = a.moe_expert_intermediate_size, nf = int64_t{mh} * ne;
    const std::string pre = "block.layers.2.mlp.moe_mlp.";
    auto t0 = std::chrono::steady_clock::now();
    const Tensor wg = random_dit_tensor({pre + "W_gate", {nf, dh, de}, DType::BF16}, 7, true);
    const Tensor wu = random_dit_tensor({pre + "W_up", {nf, dh, de}, DType::BF16}, 7, true);
    const Tensor wd = random_dit_tensor({pre + "W_down", {nf, de, dh}, DType::BF16}, 7, true);
    const Tensor gate = random_dit_tensor({pre + "gate", {nf, dh}, DType::F32}, 7, true);
    const Tensor bias = random_dit_tensor({pre + "router.expert_bias_ema", {nf}, DType::F32}, 7, true);
    // Activations: the split_linear output feeding the experts, unit scale.
    const Tensor r = random_dit_tensor({"input.mhc_bias_res_x", {t, mh * dh}, DType::BF16}, 11, false);
    const double gen_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const Fp8Blocks qg = quantize_fp8_blocks(wg, "W_gate"), qu = quantize_fp8_blocks(wu, "W_up"),
                    qd = quantize_fp8_blocks(wd, "W_down");
    const double quant_s = seconds_since(t0);
    // Weight error of the quantisation itself (the first 16 experts of W_gate).
    double wse = 0, wsr = 0;
    {
      const Tensor dq = dequantize_fp8_blocks(qg.q, qg.scale_inv, "W_gate");
      for (int64_t i = 0; i < 16 * dh * de; ++i) {
        const double x = wg.get_f32(i), y = dq.get_f32(i);
        wse += (x - y) * (x - y);
        wsr += x * x;
      }
    }
    auto be = make_cpu_backend(threads);
    Tensor idx = Tensor::empty({mh, t, k}, DType::I32), wt = Tensor::empty({mh, t, k}, DType::F32);
    be->moe_route({.r = r, .gate = gate, .bias = bias, .idx = idx, .weight = wt, .num_heads = mh,
                   .num_experts = ne, .top_k = k, .route_scale = static_cast<float>(a.moe_route_scale),
                   .normalize = a.moe_route_norm});
    Tensor o16 = Tensor::empty({t, mh * dh}, DType::BF16), o8 = Tensor::empty({t, mh * dh}, DType::BF16);
    Tensor oq = Tensor::empty({t, mh * dh}, DType::BF16);
    t0 = std::chrono::steady_clock::now();
    be->moe_experts({.r = r, .w_gate = wg, .w_up = wu, .w_down = wd, .idx = idx, .weight = wt, .out = o16,
                     .num_heads = mh, .num_experts = ne, .top_k = k});
    const double bf16_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    be->moe_experts({.r = r, .w_gate = qg.q, .w_up = qu.q, .w_down = qd.q, .w_gate_scale = qg.scale_inv,
                     .w_up_scale = qu.scale_inv, .w_down_scale = qd.scale_inv, .idx = idx, .weight = wt, .out = o8,
                     .num_heads = mh, .num_experts = ne, .top_k = k});
    const double fp8_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    be->moe_experts({.r = r, .w_gate = qg.q, .w_up = qu.q, .w_down = qd.q, .w_gate_scale = qg.scale_inv,
                     .w_up_scale = qu.scale_inv, .w_down_scale = qd.scale_inv, .idx = idx, .weight = wt, .out = oq,
                     .num_heads = mh, .num_experts = ne, .top_k = k, .fp8_compute = Fp8Compute::W8A8});
    const double w8a8_s = seconds_since(t0);
    // rel-RMS, cosine, max-abs of `got` against `ref`, and ref's max and RMS.
    struct Stats {
      double rel, cos, max_abs, ref_max, ref_rms;
    };
    auto stats = [](const Tensor& got, const Tensor& ref) {
      double se = 0, sr = 0, dot = 0, s8 = 0, mx = 0, ref_max = 0;
      for (int64_t i = 0; i < ref.numel(); ++i) {
        const double x = got.get_f32(i), y = ref.get_f32(i);
        se += (x - y) * (x - y);
        sr += y * y;
        s8 += x * x;
        dot += x * y;
        mx = std::max(mx, std::fabs(x - y));
        ref_max = std::max(ref_max, std::fabs(y));
      }
      return Stats{std::sqrt(se / sr), dot / std::sqrt(s8 * sr), mx, ref_max,
                   std::sqrt(sr / static_cast<double>(ref.numel()))};
    };
    const Stats w16 = stats(o8, o16), w8 = stats(oq, o16), w8_16 = stats(oq, o8);
    std::printf("fp8_accuracy: release width, %lld tokens x %d heads x top-%d (%d experts/head, d_head %lld, "
                "d_expert %lld)\n",
                static_cast<long long>(t), mh, k, ne, static_cast<long long>(dh), static_cast<long long>(de));
    std::printf("  weights: W_gate rel-RMS error of e4m3 + 128x128 scales %.4e\n", std::sqrt(wse / wsr));
    std::printf("  routed-expert output FP8 W8A16 vs bf16: rel-RMS %.4e, cosine %.6f, max-abs %.4e (bf16 output "
                "max %.4e, RMS %.4e)\n",
                w16.rel, w16.cos, w16.max_abs, w16.ref_max, w16.ref_rms);
    std::printf("  routed-expert output FP8 W8A8 vs bf16: rel-RMS %.4e, cosine %.6f, max-abs %.4e\n", w8.rel, w8.cos,
                w8.max_abs);
    std::printf("  routed-expert output FP8 W8A8 vs W8A16: rel-RMS %.4e, cosine %.6f, max-abs %.4e\n", w8_16.rel,
                w8_16.cos, w8_16.max_abs);
    std::printf("  time: weights %.1f s, quantise %.1f s, bf16 experts %.1f s, W8A16 experts %.1f s, W8A8 experts "
                "%.1f s\n", gen_s, quant_s, bf16_s, fp8_s, w8a8_s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8_accuracy: error: %s\n", e.what());
    return 1;
  }
}
