// Times the DiT's attention block on the CUDA backend (issue 10, docs/perf.md):
// the core (the attention op with the deferred sink's LSE: the own flash
// kernel under --cuda-attention auto, and cuDNN SDPA), the whole fused block
// (attn_qkv + core + attn_out, i.e. after the qkv GEMM to before the output
// projection), the same block unfused (the op sequence Dit::attention ran
// before: 2 x rms_norm, 2 x rope, gather v, attention with the sink, gather o,
// gate), and a same-run ceiling (a cuBLASLt bf16 8192^3 GEMM through the
// backend's linear). CUDA events on the backend's stream, median of N timed
// runs after warm-ups; TFLOP/s counts 4 * L^2 * hd * H per sample.
//
// Usage: bench_attention [--reps N] [--fp32] [--cudnn-plans] [--flash] [--fp8]   (--fp32 also times the fp32 kernel at
// 272p, ~0.2 s a call; --cudnn-plans times every SDPA plan cuDNN's heuristics A, B and fallback offer;
// --flash times the own Hopper flash kernel and compares its o and lse with cuDNN's, and at 272p with the
// fp32 kernel's; --fp8 times FP8 attention (AttentionParams::fp8: the quantiser, the FP8 flash kernel, both,
// and the kernel's Fp8FlashVariant's) against the bf16 flash kernel in interleaved rounds, with the error
// against bf16 flash and, with --fp32, the fp32 kernel)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/attn_ops.h"
#include "cuda/attention_flash.h"
#include "cuda/attn_glue_variants.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_common.h"
#include "ops/ops.h"

namespace magi2 {
namespace {

struct Bench {
  Backend& be;
  cudaStream_t s;
  int reps;

  /// Median milliseconds of `f` over `reps` runs after 3 warm-ups.
  double time(const std::function<void()>& f) { return cuda_median_ms(s, f, reps, 3); }
};

std::mt19937 rng(2026);

Tensor host_random(const Shape& shape, DType dt, float sigma) {
  Tensor t = Tensor::empty(shape, dt);
  std::normal_distribution<float> nd(0.f, sigma);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::F32)
      t.data_as<float>()[i] = nd(rng);
    else
      t.data_as<uint16_t>()[i] = f32_to_bf16_bits(nd(rng));
  }
  return t;
}

/// A device [rows, cols] tensor filled with rows of a small random block (random rows, cheap at 100k rows).
Tensor device_random(Backend& be, int64_t rows, int64_t cols, DType dt, float sigma) {
  const int64_t pool = std::min<int64_t>(rows, 2048);
  Tensor src = to_backend(be, host_random({pool, cols}, dt, sigma));
  std::vector<int32_t> idx(static_cast<size_t>(rows));
  for (auto& i : idx) i = static_cast<int32_t>(rng() % pool);
  Tensor out = be.alloc({rows, cols}, dt);
  be.gather_rows({.src = src, .dst = out, .index = to_backend(be, Tensor::from_i32({rows}, idx))});
  return out;
}

double ceiling_tflops(Backend& be, Bench& b) {
  const int64_t n = 8192;
  Tensor x = device_random(be, n, n, DType::BF16, 1.f), w = device_random(be, n, n, DType::BF16, 0.01f);
  Tensor y = be.alloc({n, n}, DType::BF16);
  const double ms = b.time([&] { be.linear({.x = x, .w = w, .y = y, .groups = Groups::single(n)}); });
  const double tf = 2.0 * n * n * n / ms * 1e-9;
  std::printf("ceiling: cuBLASLt bf16 GEMM 8192^3 %.3f ms, %.1f TFLOP/s\n", ms, tf);
  return tf;
}

/// Same-run bandwidth ceiling in GB/s: a 2 GiB device-to-device copy, read + write counted.
double copy_gbs(Backend& be, Bench& b) {
  Tensor src = be.alloc({int64_t{1} << 30}, DType::BF16), dst = be.alloc({int64_t{1} << 30}, DType::BF16);
  const double ms = b.time([&] {
    MAGI2_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, b.s));
  });
  const double gbs = 2.0 * static_cast<double>(src.nbytes()) / ms * 1e-6;
  std::printf("ceiling: device copy 2 x 2 GiB %.3f ms, %.0f GB/s\n", ms, gbs);
  return gbs;
}

/// rms(a - b) / rms(b) and max |a - b| over two same-shape device tensors (bf16 or f32).
std::pair<double, double> diff(Backend& be, const Tensor& a, const Tensor& b) {
  const Tensor ha = to_host(be, a), hb = to_host(be, b);
  auto at = [](const Tensor& x, int64_t i) {
    return x.dtype() == DType::F32 ? double(x.data_as<float>()[i]) : double(bf16_bits_to_f32(x.data_as<uint16_t>()[i]));
  };
  double num = 0, den = 0, mx = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    const double d = at(ha, i) - at(hb, i);
    num += d * d;
    den += at(hb, i) * at(hb, i);
    mx = std::max(mx, std::fabs(d));
  }
  return {std::sqrt(num / std::max(den, 1e-300)), mx};
}

/// Times one request shape; returns the core's milliseconds.
double run_shape(Backend& be, Bench& b, const char* name, const std::vector<int32_t>& lens, double ceil, double copy,
                 bool fp32, bool plans, bool flash, bool fp8) {
  const int64_t h = 24, hd = 128, d = h * hd, nb = 16;
  std::vector<int32_t> cu = {0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  const int64_t t = cu.back();
  const int64_t max_len = *std::max_element(lens.begin(), lens.end());
  double flop = 0;
  for (int32_t l : lens) flop += 4.0 * double(l) * double(l) * hd * h;

  // Inputs as the DiT holds them: qkv and g in modality order, a permutation to token order.
  Tensor qkv = device_random(be, t, 3 * d, DType::BF16, 1.f), gw = device_random(be, t, h, DType::BF16, 1.f);
  Tensor table = device_random(be, t, 6 * nb, DType::F32, 1.f);
  Tensor qn = to_backend(be, host_random({hd}, DType::F32, 0.1f));
  Tensor kn = to_backend(be, host_random({hd}, DType::F32, 0.1f));
  Tensor sinks = to_backend(be, host_random({h}, DType::F32, 1.f));
  std::vector<int32_t> perm(static_cast<size_t>(t)), inv(perm.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int32_t>(i);
  const Tensor d_perm = to_backend(be, Tensor::from_i32({t}, perm)), d_inv = to_backend(be, Tensor::from_i32({t}, inv));
  const Tensor d_cu = to_backend(be, Tensor::from_i32({static_cast<int64_t>(cu.size())}, cu));
  Tensor q = be.alloc({t, h, hd}, DType::BF16), k = be.alloc({t, h, hd}, DType::BF16);
  Tensor v = be.alloc({t, h, hd}, DType::BF16), o = be.alloc({t, h, hd}, DType::BF16);
  Tensor o_p = be.alloc({t, h, hd}, DType::BF16), lse = be.alloc({t, h}, DType::F32);
  const Groups g = Groups::single(t);
  const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));

  auto producer = [&] {
    be.attn_qkv({.qkv = qkv, .q_norm = qn, .k_norm = kn, .table = table, .src_rows = d_inv, .q = q, .k = k, .v = v,
                 .groups = g});
  };
  const AttentionParams core_p{.q = q, .k = k, .v = v, .sinks = sinks, .o = o, .cu_seqlens = d_cu,
                               .max_seqlen = max_len, .scale = scale, .lse = lse};
  auto core = [&] { be.attention(core_p); };  // the op: the own flash kernel under --cuda-attention auto
  auto st = static_cast<cudaStream_t>(cuda_stream_of(be));
  auto cudnn = [&] { cuda::attention(core_p, st, cuda::AttentionKernel::kCudnn); };
  auto consumer = [&] { be.attn_out({.o = o, .lse = lse, .sinks = sinks, .g = gw, .src_rows = d_perm, .out = o_p}); };
  producer();
  core();
  cudnn();  // first call: builds the cuDNN plan of this shape
  cuda_synchronize(be);

  const double t_core = b.time(core), t_cudnn = b.time(cudnn);
  AttentionParams sink_p = core_p;
  sink_p.lse = Tensor();
  const double t_core_sink = b.time([&] { be.attention(sink_p); });
  const double t_prod = b.time(producer), t_cons = b.time(consumer);
  const double t_block = b.time([&] {
    producer();
    core();
    consumer();
  });
  const AttnQkvParams qkv_p{.qkv = qkv, .q_norm = qn, .k_norm = kn, .table = table, .src_rows = d_inv, .q = q,
                            .k = k, .v = v, .groups = g};
  auto variant = [&](cuda::AttnQkvKernel k) { return b.time([&] { cuda::attn_qkv_variant(qkv_p, st, k); }); };
  const double t_half = variant(cuda::AttnQkvKernel::kHalfWarp);
  const AttnOutParams out_p{.o = o, .lse = lse, .sinks = sinks, .g = gw, .src_rows = d_perm, .out = o_p};
  const double t_out_half =
      b.time([&] { cuda::attn_out_variant(out_p, st, cuda::AttnOutKernel::kHalfWarp); });
  const double t_regs = variant(cuda::AttnQkvKernel::kRegisters);
  Tensor qf = be.alloc({t, h, hd}, DType::F32), kf = be.alloc({t, h, hd}, DType::F32);
  const double t_unfused = b.time([&] {
    be.rms_norm({.x = qkv.slice_cols(0, d), .w = qn, .y = qf.reshape({t, d}), .groups = g, .heads = h});
    be.rms_norm({.x = qkv.slice_cols(d, 2 * d), .w = kn, .y = kf.reshape({t, d}), .groups = g, .heads = h});
    be.rope({.x = qf, .table = table, .out = q, .src_rows = d_inv});
    be.rope({.x = kf, .table = table, .out = k, .src_rows = d_inv});
    be.gather_rows({.src = qkv.slice_cols(2 * d, 3 * d), .dst = v.reshape({t, d}), .index = d_inv});
    be.attention(sink_p);
    be.gather_rows({.src = o.reshape({t, d}), .dst = o_p.reshape({t, d}), .index = d_perm});
    be.gate({.o = o_p, .g = gw});
  });
  auto tf = [&](double ms) { return flop / ms * 1e-9; };
  // o and lse of the core's inputs from the fp32 CUDA-core kernel (fp32 scores, softmax and P V).
  auto fp32_reference = [&] {
    Tensor o3 = be.alloc({t, h, hd}, DType::BF16), lse3 = be.alloc({t, h}, DType::F32);
    AttentionParams rp = core_p;
    rp.o = o3;
    rp.lse = lse3;
    cuda::attention_fp32(rp, st);
    cuda_synchronize(be);
    return std::pair<Tensor, Tensor>(o3, lse3);
  };
  std::printf("\n%s: samples", name);
  for (int32_t l : lens) std::printf(" %d", l);
  std::printf(", %lld x %lld, %.3g GFLOP\n", static_cast<long long>(h), static_cast<long long>(hd), flop * 1e-9);
  std::printf("| what | ms | TFLOP/s | of ceiling |\n|---|---:|---:|---:|\n");
  auto row = [&](const char* what, double ms) {
    std::printf("| %s | %.3f | %.1f | %.3f |\n", what, ms, tf(ms), tf(ms) / ceil);
  };
  row("core: the attention op + LSE (deferred sink; auto = the own flash kernel)", t_core);
  row("core: cuDNN SDPA + LSE (--cuda-attention cudnn)", t_cudnn);
  row("core + in-place sink correction (attention op without lse: cuDNN)", t_core_sink);
  std::printf("| producer attn_qkv | %.3f | | |\n| consumer attn_out | %.3f | | |\n", t_prod, t_cons);
  row("fused block: attn_qkv + core + attn_out", t_block);
  row("unfused block (the previous op sequence)", t_unfused);
  const double bytes = 2.0 * 2.0 * static_cast<double>(t * 3 * d);  // qkv read once, q, k, v written (bf16)
  auto prod = [&](const char* what, double ms) {
    std::printf("| producer kernel: %s | %.3f | %.0f GB/s | %.3f of copy |\n", what, ms, bytes / ms * 1e-6,
                bytes / ms * 1e-6 / copy);
  };
  prod("half-warp, shared-memory vector (kHalfWarp, the oracle)", t_half);
  prod("registers + shuffles (kRegisters, the default)", t_regs);
  const double out_bytes = 2.0 * 2.0 * static_cast<double>(t * d);  // o read, out written (bf16)
  std::printf("| consumer kernel: half-warp per (row, head) (kHalfWarp, the oracle) | %.3f | %.0f GB/s | %.3f of copy |\n",
              t_out_half, out_bytes / t_out_half * 1e-6, out_bytes / t_out_half * 1e-6 / copy);
  std::printf("| consumer kernel: warp per row (kRows, the default) | %.3f | %.0f GB/s | %.3f of copy |\n", t_cons,
              out_bytes / t_cons * 1e-6, out_bytes / t_cons * 1e-6 / copy);
  std::printf("block / core = %.3f (target <= 1.1); unfused / fused = %.3f\n", t_block / t_core,
              t_unfused / t_block);
  if (plans) {
    std::printf("every cuDNN SDPA plan of this shape (median of 5 runs each; the engine's default is the first "
                "heuristics-A plan):\n");
    for (const auto& [name, ms] : cuda::cudnn_sdpa_plan_times(core_p, st, 5))
      std::printf("| cuDNN plan %s | %.3f | %.1f | %.3f |\n", name.c_str(), ms, tf(ms), tf(ms) / ceil);
    // The attention op again after the listing (clock drift). A plan timed alone between two events
    // reads ~0.5 ms lower at 272p than the same plan with any other op in the window (measured on the
    // H200, 2026-12-04 fifth session): compare plans with each other, not with the op's row.
    row("core again (cuDNN SDPA, eager)", b.time(cudnn));
  }
  if (flash) {
    Tensor o2 = be.alloc({t, h, hd}, DType::BF16), lse2 = be.alloc({t, h}, DType::F32);
    AttentionParams fp = core_p;
    fp.o = o2;
    fp.lse = lse2;
    const cuda::AttentionShape a = cuda::check_attention(fp);
    auto fl = [&] { cuda::attention_flash(fp, a, st); };
    producer();
    cudnn();
    fl();
    cuda_synchronize(be);
    const auto [o_rel, o_max] = diff(be, o2, o);
    const auto [l_rel, l_max] = diff(be, lse2, lse);
    std::printf("flash vs cuDNN: o rel-RMS %.3e (max |d| %.3e), lse rel-RMS %.3e (max |d| %.3e)\n", o_rel, o_max,
                l_rel, l_max);
    if (fp32) {  // both against the fp32 CUDA-core kernel (fp32 scores, softmax and P V)
      const auto [o3, lse3] = fp32_reference();
      std::printf("vs the fp32 kernel: o rel-RMS flash %.3e, cuDNN %.3e; lse max |d| flash %.3e, cuDNN %.3e\n",
                  diff(be, o2, o3).first, diff(be, o, o3).first, diff(be, lse2, lse3).second,
                  diff(be, lse, lse3).second);
    }
    row("core: own flash kernel + LSE (attention_flash)", b.time(fl));
    row("core again: cuDNN SDPA + LSE", b.time(cudnn));
    const std::pair<const char*, cuda::FlashVariant> variants[] = {
        {"ping-pong warpgroups (the default)", cuda::FlashVariant::kDefault},
        {"no ping-pong", cuda::FlashVariant::kNoPingPong},
        {"ping-pong, three-stage rings", cuda::FlashVariant::kThreeStages}};
    // Clocks drift within a run: each variant is timed as 4 back-to-back calls (one window), in three
    // interleaved rounds (also avoids the single-kernel window's low reading, see --cudnn-plans).
    constexpr int kBatch = 4;
    std::vector<std::vector<double>> ms(std::size(variants));
    for (int round = 0; round < 3; ++round)
      for (size_t i = 0; i < std::size(variants); ++i)
        ms[i].push_back(b.time([&] {
          for (int r = 0; r < kBatch; ++r) cuda::attention_flash(fp, a, st, variants[i].second);
        }) / kBatch);
    const double ms_cudnn = b.time([&] {
      for (int r = 0; r < kBatch; ++r) cudnn();
    }) / kBatch;
    for (size_t i = 0; i < std::size(variants); ++i) {
      cuda::attention_flash(fp, a, st, variants[i].second);
      cuda_synchronize(be);
      const double rel = diff(be, o2, o).first;
      std::sort(ms[i].begin(), ms[i].end());
      std::printf("| flash variant: %s (o rel-RMS vs cuDNN %.2e; 3 rounds, min %.3f, max %.3f) | %.3f | %.1f | %.3f |\n",
                  variants[i].first, rel, ms[i][0], ms[i][2], ms[i][1], tf(ms[i][1]),
                  tf(ms[i][1]) / ceil);
    }
    row("cuDNN SDPA + LSE, 4 back-to-back calls (per call)", ms_cudnn);
  }
  if (fp8) {
    Tensor o8 = be.alloc({t, h, hd}, DType::BF16), lse8 = be.alloc({t, h}, DType::F32);
    Tensor ob = be.alloc({t, h, hd}, DType::BF16), lseb = be.alloc({t, h}, DType::F32);
    AttentionParams p8 = core_p, pb = core_p;
    p8.o = o8;
    p8.lse = lse8;
    p8.fp8 = true;
    pb.o = ob;
    pb.lse = lseb;
    const cuda::AttentionShape a = cuda::check_attention(p8);
    const int64_t nseq = static_cast<int64_t>(lens.size());
    Tensor scratch = be.alloc({cuda::attention_fp8_bytes(t, h, nseq) + 256}, DType::U8);
    const auto base = (reinterpret_cast<uintptr_t>(scratch.data()) + 255) / 256 * 256;
    const cuda::FlashFp8Operands ops = cuda::attention_fp8_layout(reinterpret_cast<void*>(base), t, h, nseq);
    producer();
    be.attention(p8);  // the op, with its own scratch (made on this first call)
    cuda::attention_flash(pb, a, st);
    cuda_synchronize(be);
    const auto [o_rel, o_max] = diff(be, o8, ob);
    const auto [l_rel, l_max] = diff(be, lse8, lseb);
    std::printf("FP8 vs bf16 flash: o rel-RMS %.3e (max |d| %.3e), lse rel-RMS %.3e (max |d| %.3e)\n", o_rel, o_max,
                l_rel, l_max);
    if (fp32) {
      const Tensor o3 = fp32_reference().first;
      std::printf("vs the fp32 kernel: o rel-RMS FP8 %.3e, bf16 flash %.3e\n", diff(be, o8, o3).first,
                  diff(be, ob, o3).first);
    }
    // Interleaved rounds of 4-call windows (clock drift; see --flash).
    constexpr int kBatch = 4;
    const std::pair<const char*, std::function<void()>> runs[] = {
        {"bf16 flash (attention_flash)", [&] { cuda::attention_flash(pb, a, st); }},
        {"FP8: quantiser + flash (the op with fp8)", [&] { be.attention(p8); }},
        {"FP8 flash kernel alone (attention_flash_fp8: no ping-pong, the default)",
         [&] { cuda::attention_flash_fp8(p8, a, ops, st); }},
        {"FP8 kernel, ping-pong warpgroups (kPingPong)",
         [&] { cuda::attention_flash_fp8(p8, a, ops, st, cuda::Fp8FlashVariant::kPingPong); }},
        {"FP8 kernel, three-stage rings (kThreeStages)",
         [&] { cuda::attention_flash_fp8(p8, a, ops, st, cuda::Fp8FlashVariant::kThreeStages); }},
        {"FP8 kernel, 2 of 8 exps on the FMA pipe (kEmu2)",
         [&] { cuda::attention_flash_fp8(p8, a, ops, st, cuda::Fp8FlashVariant::kEmu2); }}};
    cuda::attention_fp8_quantize(p8, a, ops, st);
    for (size_t i = 3; i < std::size(runs); ++i) {  // each kernel variant's error against bf16 flash
      runs[i].second();
      cuda_synchronize(be);
      std::printf("%s: o rel-RMS vs bf16 flash %.3e\n", runs[i].first, diff(be, o8, ob).first);
    }
    std::vector<std::vector<double>> ms(std::size(runs));
    for (int round = 0; round < 3; ++round)
      for (size_t i = 0; i < std::size(runs); ++i)
        ms[i].push_back(b.time([&] {
          for (int r = 0; r < kBatch; ++r) runs[i].second();
        }) / kBatch);
    for (size_t i = 0; i < std::size(runs); ++i) {
      std::sort(ms[i].begin(), ms[i].end());
      std::printf("| %s (3 rounds, min %.3f, max %.3f) | %.3f | %.1f | %.3f |\n", runs[i].first, ms[i][0], ms[i][2],
                  ms[i][1], tf(ms[i][1]), tf(ms[i][1]) / ceil);
    }
    const double t_q = b.time([&] { cuda::attention_fp8_quantize(p8, a, ops, st); });
    const double q_bytes = 3.0 * 2.0 * static_cast<double>(t * d) + 3.0 * static_cast<double>(t * d);
    std::printf("| FP8 quantiser alone (attention_fp8_quantize: bf16 q, k, v in, e4m3 out) | %.3f | %.0f GB/s | %.3f "
                "of copy |\n",
                t_q, q_bytes / t_q * 1e-6, q_bytes / t_q * 1e-6 / copy);
    // The producer into the FP8 operands (AttnQkvParams::fp8) in each form: bf16 qkv in, e4m3 out (the
    // older forms also write bf16 k and v and read them back: the GB/s counts only the bytes in and out).
    AttnQkvParams p8q = qkv_p;
    p8q.fp8 = true;
    p8q.cu_seqlens = d_cu;
    const std::pair<const char*, cuda::AttnQkvFp8Kernel> forms[] = {
        {"one kernel a key tile (the default)", cuda::AttnQkvFp8Kernel::kTiles},
        {"q in the producer, k and v quantised", cuda::AttnQkvFp8Kernel::kQInProducer},
        {"two-pass: attn_qkv + the quantiser", cuda::AttnQkvFp8Kernel::kTwoPass}};
    for (const auto& [what, form] : forms) {
      const double t_p = b.time([&] { cuda::attn_qkv_fp8_variant(p8q, st, form); });
      std::printf("| FP8 producer (AttnQkvParams::fp8), %s: bf16 qkv in, e4m3 out | %.3f | %.0f GB/s | %.3f of "
                  "copy |\n",
                  what, t_p, q_bytes / t_p * 1e-6, q_bytes / t_p * 1e-6 / copy);
    }
  }
  if (fp32) {
    Bench slow{be, b.s, 3};
    const double t32 = slow.time([&] { cuda::attention_fp32(sink_p, st); });
    row("fp32 CUDA-core kernel (before, with the sink)", t32);
  }
  return t_core;
}

int run(int argc, char** argv) {
  int reps = 15;
  bool fp32 = false, plans = false, flash = false, fp8 = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--fp32"))
      fp32 = true;
    else if (!std::strcmp(argv[i], "--cudnn-plans"))
      plans = true;
    else if (!std::strcmp(argv[i], "--flash"))
      flash = true;
    else if (!std::strcmp(argv[i], "--fp8"))
      fp8 = true;
    else
      throw Error(str_cat("bench_attention: unknown argument '", argv[i],
                          "' (usage: bench_attention [--reps N] [--fp32] [--cudnn-plans] [--flash] [--fp8])"));
  }
  if (cuda_device_count() == 0) throw Error("bench_attention: no CUDA GPU present");
  auto be = make_cuda_backend(0);
  Bench b{*be, static_cast<cudaStream_t>(cuda_stream_of(*be)), reps};
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("GPU: %s; median of %d runs after 3 warm-ups, CUDA events on the backend stream\n", prop.name, reps);
  const double ceil = ceiling_tflops(*be, b);
  const double copy = copy_gbs(*be, b);
  const double t272 = run_shape(*be, b, "272p", {14886, 14986}, ceil, copy, fp32, plans, flash, fp8);
  // Without cuDNN (fp32 fallback, ~0.2 s a call at 272p) 540p would take minutes.
  if (t272 > 50.0)
    std::printf("\n540p skipped: the core took %.1f ms at 272p (no cuDNN plan?)\n", t272);
  else
    run_shape(*be, b, "540p", {57894, 57994}, ceil, copy, false, plans, flash, fp8);
  return 0;
}

}  // namespace
}  // namespace magi2

int main(int argc, char** argv) {
  try {
    return magi2::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
