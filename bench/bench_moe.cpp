// Times the CUDA multi-head MoE pieces at the release shapes (12 heads x 256
// experts, top-6, d_head 256, d_expert 1280) with random weights and natural
// routing: the router, the routed experts (sort + gather, W13, SwiGLU7, W2,
// combine and the total), the same with skewed forced routing (one expert
// taking 8,192 rows), and one mHC branch boundary pair at D = 3072; the router
// and mHC both as the reference kernels and as the opt-in fused ones
// (src/cuda/fused_kernels.h; the fused post + residual also with its first
// kernel, MhcPostKernel::kRing); next to a cuBLASLt bf16 8192^3 GEMM and a
// device-to-device copy of the same run; the routed experts also with FP8
// banks (W8A16 and W8A8, docs/fp8.md). Not a test: prints a markdown
// table (docs/perf.md). Usage: bench_moe [--mhc] [tokens ...] (default 29872
// 115888, the 272p and 540p packings of ../shared/perf-anchor.md; --mhc: only
// the ceilings and the mHC rows).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_common.h"
#include "cuda/fused_kernels.h"
#include "cuda/linear.h"
#include "cuda/mhc_moe.h"
#include "ops/ops.h"

namespace magi2 {
namespace {

constexpr int kHeads = 12, kExperts = 256, kTopK = 6;
constexpr int64_t kDh = 256, kDe = 1280, kD = 3072;
constexpr int kWarm = 3, kReps = 11;

struct Bench {
  std::unique_ptr<Backend> be = make_cuda_backend(0);
  cudaStream_t s = static_cast<cudaStream_t>(cuda_stream_of(*be));
  std::mt19937 rng{2026};

  // A device tensor of uniform values in [-scale, scale), a 16 M-element random
  // pattern repeated (enough variety for timing, fast to make).
  Tensor fill(const Shape& shape, DType dt, float scale) {
    Tensor d = be->alloc(shape, dt);
    const int64_t n = d.numel(), chunk = std::min<int64_t>(n, int64_t{1} << 24);
    const size_t es = dtype_size(dt);
    std::vector<uint8_t> host(static_cast<size_t>(chunk) * es);
    std::uniform_real_distribution<float> u(-scale, scale);
    for (int64_t i = 0; i < chunk; ++i) {
      const float v = u(rng);
      if (dt == DType::F32)
        reinterpret_cast<float*>(host.data())[i] = v;
      else
        reinterpret_cast<uint16_t*>(host.data())[i] = f32_to_bf16_bits(v);
    }
    for (int64_t o = 0; o < n; o += chunk) {
      const int64_t m = std::min(chunk, n - o);
      MAGI2_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(d.data()) + o * es, host.data(), m * es,
                                  cudaMemcpyHostToDevice));
    }
    return d;
  }

  // Median milliseconds of f (CUDA events), kReps runs after kWarm warm-ups.
  double median_ms(const std::function<void()>& f) { return cuda_median_ms(s, f, kReps, kWarm); }

  // Per-stage medians of the grouped experts (events at the runner's marks).
  std::vector<double> stage_ms(cuda::MoeExpertsRunner& run, const MoeExpertsParams& p) {
    std::vector<cudaEvent_t> ev(6);
    for (auto& e : ev) cudaEventCreate(&e);
    std::vector<std::vector<float>> ms(6);
    for (int i = 0; i < kWarm + kReps; ++i) {
      cudaEventRecord(ev[0], s);
      run.run(p, s, [&](int stage) { cudaEventRecord(ev[stage + 1], s); });
      cudaEventSynchronize(ev[5]);
      if (i < kWarm) continue;
      for (int j = 0; j < 5; ++j) {
        float v = 0;
        cudaEventElapsedTime(&v, ev[j], ev[j + 1]);
        ms[j].push_back(v);
      }
      float v = 0;
      cudaEventElapsedTime(&v, ev[0], ev[5]);
      ms[5].push_back(v);
    }
    for (auto& e : ev) cudaEventDestroy(e);
    std::vector<double> med;
    for (auto& m : ms) {
      std::sort(m.begin(), m.end());
      med.push_back(m[m.size() / 2]);
    }
    return med;
  }
};

void row(const char* what, double ms, double flop, double ceiling) {
  if (flop > 0) {
    const double tf = flop / ms * 1e-9;
    std::printf("| %s | %.3f | %.0f | %.2f |\n", what, ms, tf, tf / ceiling);
  } else {
    std::printf("| %s | %.3f | - | - |\n", what, ms);
  }
}

// A bandwidth-bound row: GB/s of the bytes it must move and the fraction of the copy ceiling.
void row_gbs(const char* what, double ms, double bytes, double copy_gbs) {
  const double gbs = bytes / ms * 1e-6;
  std::printf("| %s | %.3f | %.0f GB/s | %.2f of copy |\n", what, ms, gbs, gbs / copy_gbs);
}

int run(int argc, char** argv) {
  std::vector<int64_t> tokens;
  bool mhc_only = false;  // --mhc: only the ceilings and the mHC boundary rows
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--mhc") {
      mhc_only = true;
      continue;
    }
    char* end = nullptr;
    const long long v = std::strtoll(argv[i], &end, 10);
    MAGI2_CHECK(end != argv[i] && *end == '\0' && v > 0, "bench_moe: token count '", argv[i],
                "' is not a positive integer");
    tokens.push_back(v);
  }
  if (tokens.empty()) tokens = {29872, 115888};
  Bench b;
  const int64_t nf = int64_t{kHeads} * kExperts;

  // Same-run ceiling: cuBLASLt bf16 8192^3 through the backend's linear.
  double ceiling = 0;
  {
    Tensor x = b.fill({8192, 8192}, DType::BF16, 1.f), w = b.fill({8192, 8192}, DType::BF16, 0.02f);
    Tensor y = b.be->alloc({8192, 8192}, DType::BF16);
    const double ms = b.median_ms([&] { b.be->linear({.x = x, .w = w, .y = y, .groups = Groups::single(8192)}); });
    ceiling = 2.0 * 8192.0 * 8192.0 * 8192.0 / ms * 1e-9;
    std::printf("cuBLASLt bf16 8192^3: %.3f ms, %.0f TFLOP/s (the ceiling column's unit)\n", ms, ceiling);
  }

  // Same-run bandwidth ceiling: a 2 GiB device-to-device copy (read + write counted).
  double copy_gbs = 0;
  {
    Tensor src = b.be->alloc({int64_t{1} << 30}, DType::BF16), dst = b.be->alloc({int64_t{1} << 30}, DType::BF16);
    const double ms = b.median_ms([&] {
      MAGI2_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, b.s));
    });
    copy_gbs = 2.0 * static_cast<double>(src.nbytes()) / ms * 1e-6;
    std::printf("device copy 2 x 2 GiB: %.3f ms, %.0f GB/s (the GB/s rows' ceiling)\n", ms, copy_gbs);
  }

  const float ga = 1.7f / std::sqrt(static_cast<float>(kDh));
  Tensor gate = b.fill({nf, kDh}, DType::F32, ga), bias = b.fill({nf}, DType::F32, 0.05f);
  Tensor w_gate = b.fill({nf, kDh, kDe}, DType::BF16, 3.f / std::sqrt(static_cast<float>(kDh)));
  Tensor w_up = b.fill({nf, kDh, kDe}, DType::BF16, 3.f / std::sqrt(static_cast<float>(kDh)));
  Tensor w_down = b.fill({nf, kDe, kDh}, DType::BF16, 1.7f / std::sqrt(static_cast<float>(kDe)));
  // FP8 banks (random e4m3 codes, positive block scales near those of the bf16 banks' quantisation).
  struct Fp8Banks {
    Tensor g, u, d, gs, us, ds;
    MoeExpertsParams with(MoeExpertsParams p, Fp8Compute m) const {
      p.w_gate = g, p.w_up = u, p.w_down = d, p.w_gate_scale = gs, p.w_up_scale = us, p.w_down_scale = ds;
      p.fp8_compute = m;
      return p;
    }
  } e8;
  {
    auto codes = [&](const Shape& sh, uint64_t seed) {
      Tensor t = b.be->alloc(sh, DType::F8E4M3);
      cuda::fill_random(t, seed, 0.25f, b.s);
      return t;
    };
    auto scales = [&](const Shape& sh, float mid) {
      Tensor h = Tensor::empty(sh, DType::F32);
      std::uniform_real_distribution<float> u(0.5f * mid, 1.5f * mid);
      for (int64_t i = 0; i < h.numel(); ++i) h.data_as<float>()[i] = u(b.rng);
      Tensor d = b.be->alloc(sh, DType::F32);
      b.be->copy({.src = h, .dst = d});
      return d;
    };
    const int64_t kb = kDh / 128, nb = kDe / 128;
    e8 = {codes({nf, kDh, kDe}, 11), codes({nf, kDh, kDe}, 12), codes({nf, kDe, kDh}, 13),
          scales({nf, kb, nb}, 4.2e-4f), scales({nf, kb, nb}, 4.2e-4f), scales({nf, nb, kb}, 1.1e-4f)};
  }
  const cuda::DeviceAlloc dev_alloc = [](size_t bytes) {
    void* p = nullptr;
    MAGI2_CUDA_CHECK(cudaMalloc(&p, bytes));
    return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
  };
  // The routed experts three ways: the CUTLASS W13 with the separate SwiGLU7
  // pass (reference), the CUTLASS epilogues, and the whole expert in one kernel
  // (MAGI2_MOE_KERNEL=fused; its time is in the W13 row).
  cuda::MoeExpertsRunner runner(dev_alloc, CudaOptions::kDefaultMoeMaxRows,
                                cuda::MoeExpertsRunner::W13Kernel::kGrouped);
  cuda::MoeExpertsRunner fused(dev_alloc, CudaOptions::kDefaultMoeMaxRows,
                               cuda::MoeExpertsRunner::W13Kernel::kFused);
  cuda::MoeExpertsRunner epilogue(dev_alloc, CudaOptions::kDefaultMoeMaxRows,
                                  cuda::MoeExpertsRunner::W13Kernel::kEpilogue);
  // The opt-in fast kernels (MAGI2_MHC_KERNEL / MAGI2_ROUTER_KERNEL=fused), timed beside the reference ones.
  cuda::SplitScratch scratch(dev_alloc);
  const cuda::FusedPaths fast{.mhc = true, .router = true, .scratch = &scratch};
  const cuda::FusedPaths fast_warp{
      .mhc = true, .router = true, .scratch = &scratch, .router_select = cuda::RouteSelect::kWarp};

  for (const int64_t t : tokens) {
    std::printf("\n### %lld tokens (%d heads x %d experts, top-%d, d_head %lld, d_expert %lld)\n\n",
                static_cast<long long>(t), kHeads, kExperts, kTopK, static_cast<long long>(kDh),
                static_cast<long long>(kDe));
    std::printf("| stage | ms (median of %d) | TFLOP/s | of cuBLASLt 8192^3 |\n|---|---:|---:|---:|\n", kReps);
    if (!mhc_only) {  // the router and the routed experts
      Tensor r = b.fill({t, kHeads * kDh}, DType::BF16, 2.f);
      Tensor idx = b.be->alloc({kHeads, t, kTopK}, DType::I32), wt = b.be->alloc({kHeads, t, kTopK}, DType::F32);
      Tensor out = b.be->alloc({t, kHeads * kDh}, DType::BF16);
      const MoeRouteParams rp{.r = r, .gate = gate, .bias = bias, .idx = idx, .weight = wt, .num_heads = kHeads,
                              .num_experts = kExperts, .top_k = kTopK, .route_scale = 4.9f};
      row("router (logits fp32, top-6, weights)", b.median_ms([&] { cuda::moe_route(rp, b.s); }),
          2.0 * t * nf * kDh, ceiling);
      // FLOPs counted once (the fp32 contraction), not per bf16 split term.
      row("router, fused (bf16x3 tensor cores + top-6, MAGI2_ROUTER_KERNEL=fused)",
          b.median_ms([&] { cuda::moe_route(rp, b.s, &fast); }), 2.0 * t * nf * kDh, ceiling);
      // The first fused router's selection (a warp per row over all experts): the same bytes, timed beside.
      row("router, fused, warp selection (RouteSelect::kWarp)",
          b.median_ms([&] { cuda::moe_route(rp, b.s, &fast_warp); }), 2.0 * t * nf * kDh, ceiling);
      const MoeExpertsParams ep{.r = r, .w_gate = w_gate, .w_up = w_up, .w_down = w_down, .idx = idx, .weight = wt,
                                .out = out, .num_heads = kHeads, .num_experts = kExperts, .top_k = kTopK};
      const double rows = static_cast<double>(t) * kHeads * kTopK;
      const double f13 = 2.0 * rows * kDh * 2 * kDe, f2 = 2.0 * rows * kDe * kDh;
      auto experts_rows = [&](const char* tag, const std::vector<double>& m) {
        const std::string p = tag;
        row((p + "sort + gather").c_str(), m[0], 0, ceiling);
        row((p + "W13 grouped GEMM").c_str(), m[1], f13, ceiling);
        row((p + "SwiGLU7").c_str(), m[2], 0, ceiling);
        row((p + "W2 grouped GEMM").c_str(), m[3], f2, ceiling);
        row((p + "combine").c_str(), m[4], 0, ceiling);
        row((p + "routed experts total").c_str(), m[5], f13 + f2, ceiling);
      };
      experts_rows("natural: ", b.stage_ms(runner, ep));
      experts_rows("natural, fused experts (gather, W13, SwiGLU7 and W2 in the W13 row): ", b.stage_ms(fused, ep));
      experts_rows("natural, SwiGLU7 in the gate GEMM's epilogue (inside the W13 row): ", b.stage_ms(epilogue, ep));
      experts_rows("natural, FP8 W8A16 (dequantisation in the sort + gather row, the bf16 fused kernel): ",
                   b.stage_ms(fused, e8.with(ep, Fp8Compute::W8A16)));
      experts_rows("natural, FP8 W8A8 (quantising scatter and bank transpositions in the sort + gather row, the FP8 "
                   "fused kernel in the W13 row): ",
                   b.stage_ms(fused, e8.with(ep, Fp8Compute::W8A8)));
      // The banks held K-major since the load (Backend::moe_prepare_banks): what generate and bench run.
      MoeExpertsParams ek = e8.with(ep, Fp8Compute::W8A8);
      b.be->moe_prepare_banks(ek);
      experts_rows(
          "natural, FP8 W8A8, K-major banks (moe_prepare_banks; quantising scatter in the sort + gather row): ",
                   b.stage_ms(fused, ek));

      // Skewed: forced routing, distinct experts per (head, token), expert 0 of
      // head 0 taking the first route of the first 8,192 tokens.
      {
        Tensor forced = Tensor::empty({kHeads, t, kTopK}, DType::I32);
        std::vector<int32_t> perm(kExperts);
        for (int64_t i = 0; i < kHeads * t; ++i) {
          std::iota(perm.begin(), perm.end(), 0);
          for (int j = 0; j < kTopK; ++j) std::swap(perm[j], perm[j + b.rng() % (kExperts - j)]);
          if (i < std::min<int64_t>(t, 8192)) std::swap(perm[0], *std::find(perm.begin(), perm.end(), 0));
          std::copy(perm.begin(), perm.begin() + kTopK, forced.data_as<int32_t>() + i * kTopK);
        }
        Tensor fd = b.be->alloc(forced.shape(), DType::I32);
        b.be->copy({.src = forced, .dst = fd});
        MoeRouteParams fp = rp;
        fp.forced_idx = fd;
        b.be->moe_route(fp);
        experts_rows("skewed (8,192 rows on one expert): ", b.stage_ms(runner, ep));
        experts_rows("skewed, fused experts: ", b.stage_ms(fused, ep));
        experts_rows("skewed, epilogues: ", b.stage_ms(epilogue, ep));
        experts_rows("skewed, FP8 W8A8, K-major banks: ", b.stage_ms(fused, ek));
      }
    }

    // One mHC boundary pair (logits + pre before a branch, post + residual after).
    {
      Tensor state = b.fill({t, 4 * kD}, DType::BF16, 1.f), o = b.fill({t, kD}, DType::BF16, 1.f);
      Tensor norm_w = b.fill({4 * kD}, DType::F32, 0.1f), phi = b.fill({4 * kD, 24}, DType::F32, 0.02f);
      Tensor logits = b.be->alloc({t, 24}, DType::F32), a = b.be->alloc({t, kD}, DType::BF16);
      MhcBranchWeights mw{.alpha_pre = b.fill({1}, DType::F32, 1.f), .alpha_post = b.fill({1}, DType::F32, 1.f),
                          .alpha_res = b.fill({1}, DType::F32, 1.f), .bias_pre = b.fill({4}, DType::F32, 1.f),
                          .bias_post = b.fill({4}, DType::F32, 1.f), .bias_res = b.fill({4, 4}, DType::F32, 1.f)};
      const float c = 1.0f / std::sqrt(static_cast<float>(4 * kD));
      const MhcLogitsParams lp{.state = state, .norm_w = norm_w, .phi = phi, .logits = logits,
                               .groups = Groups::single(t)};
      const MhcPreParams pp{.state = state, .logits = logits, .w = &mw, .a = a, .c = c};
      const MhcPostResParams qp{.state = state, .o = o, .logits = logits, .w = &mw, .c = c};
      // Bytes: logits read the state, pre reads it and writes a, post reads state and o and writes the state.
      const double sb = 2.0 * t * 4 * kD, ab = 2.0 * t * kD;
      for (const cuda::FusedPaths* f : {static_cast<const cuda::FusedPaths*>(nullptr), &fast}) {
        const std::string tag = f ? "mHC fused (MAGI2_MHC_KERNEL=fused): " : "mHC reference: ";
        const double lg = b.median_ms([&] { cuda::mhc_logits(lp, b.s, f); });
        const double pre = b.median_ms([&] { cuda::mhc_pre(pp, b.s, f); });
        const double post = b.median_ms([&] { cuda::mhc_post_res(qp, b.s, f); });
        row_gbs((tag + "logits (one branch)").c_str(), lg, sb, copy_gbs);
        row_gbs((tag + "pre (one branch)").c_str(), pre, sb + ab, copy_gbs);
        row_gbs((tag + "post + residual (one branch)").c_str(), post, 2 * sb + ab, copy_gbs);
        row_gbs((tag + "both branches of a layer").c_str(), 2 * (lg + pre + post), 2 * (4 * sb + 2 * ab), copy_gbs);
      }
      // What the DiT step ran from the fourteenth to the nineteenth session: the post + residual also writes
      // the new rows' sums of squares (MhcPostResParams::ss), and the next logits are one cuBLASLt GEMM of 72
      // columns (24 logits x 3 split terms) from them (mhc_logits_gemm, with a runner of its own here).
      {
        Tensor ss = b.be->alloc({t}, DType::F32);
        MhcPostResParams qs = qp;
        qs.ss = ss;
        MhcLogitsParams ls = lp;
        ls.ss = ss;
        constexpr size_t kWs = size_t{32} << 20;
        const std::shared_ptr<void> ws = dev_alloc(kWs);
        cuda::LinearRunner gemm_runner(ws.get(), kWs, dev_alloc);
        cuda::FusedPaths gemm = fast;
        gemm.linear = &gemm_runner;
        const double post = b.median_ms([&] { b.be->mhc_post_res(qs); });
        const double lg = b.median_ms([&] { MAGI2_CHECK(cuda::mhc_logits_gemm(ls, gemm, b.s), "mhc_logits_gemm"); });
        const double pre = b.median_ms([&] { b.be->mhc_pre(pp); });
        row_gbs("mHC, sums of squares from the post: logits as one GEMM (one branch)", lg, sb, copy_gbs);
        row_gbs("mHC, sums of squares from the post: post + residual (one branch)", post, 2 * sb + ab, copy_gbs);
        row_gbs("mHC, sums of squares from the post: both branches of a layer", 2 * (lg + pre + post),
                2 * (4 * sb + 2 * ab), copy_gbs);
        // What the DiT step runs since the twentieth session: the next logits in the post + residual's pass
        // (MhcPostResParams::next, mhc_post_logits.cu), the logits read no state.
        MhcPostResParams qn = qs;
        qn.next = {.norm_w = norm_w, .phi = phi, .logits = logits, .groups = Groups::single(t)};
        const double pn = b.median_ms([&] { b.be->mhc_post_res(qn); });
        row_gbs("mHC, post + residual with the next logits in one pass (one branch)", pn, 2 * sb + ab, copy_gbs);
        row_gbs("mHC, the next logits in the post's pass: both branches of a layer", 2 * (pre + pn),
                2 * (3 * sb + 2 * ab), copy_gbs);
        // The same pass without the update: the backend's mhc_logits (the first branch of a forward).
        row_gbs("mHC, logits by the pass alone (mhc_logits_pass, one branch)",
                b.median_ms([&] { b.be->mhc_logits(lp); }), sb, copy_gbs);
      }
      // The first fused post + residual kernel (fused_kernels.h MhcPostKernel::kRing; same bytes).
      {
        cuda::FusedPaths variant = fast;
        variant.mhc_post = cuda::MhcPostKernel::kRing;
        const double post = b.median_ms([&] { cuda::mhc_post_res(qp, b.s, &variant); });
        row_gbs("mHC fused post + residual, first ring (kRing) (one branch)", post, 2 * sb + ab, copy_gbs);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace magi2

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured (pipes buffer fully)
  try {
    return magi2::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_moe: %s\n", e.what());
    return 1;
  }
}
