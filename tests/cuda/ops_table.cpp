// The entries of the backend op table (ops_table.h). Shapes follow the DiT
// (spec magi2-dit.md: D = 3072, 24 heads x 128, I = 8192, 16 RoPE bands per
// axis, 4 mHC streams, MoE heads of d_head 256) and the sampler ops of the
// device-resident step; "2048 tokens" is the release width where the CPU
// reference stays cheap. Tolerances are the ones stated by
// tests/cuda/test_cuda_{backend,dit_step,fused}.cpp. The attention, mHC/MoE,
// text encoder and codec rows live in ops_table_{attention,mhc_moe,text,codec}.cpp.
#include "ops_table.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_common.h"
#include "cuda/fused_kernels.h"
#include "cuda_fixture.h"
#include "ops/fp8_blocks.h"
#include "ops/numerics.h"
#include "pipeline/flow_unipc.h"

namespace magi2::test {

Tensor CaseBuilder::uniform(const Shape& shape, DType dt, float lo, float hi) {
  Tensor t = Tensor::empty(shape, dt);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = lo + (hi - lo) * static_cast<float>((next() >> 40) * 0x1p-24);
    if (dt == DType::F32)
      t.data_as<float>()[i] = v;
    else
      t.data_as<uint16_t>()[i] = f32_to_bf16_bits(v);
  }
  return t;
}

uint64_t CaseBuilder::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Tensor CaseBuilder::in(const Tensor& host) {
  c_.bytes += static_cast<double>(host.nbytes());
  Tensor d = be_.alloc(host.shape(), host.dtype());
  be_.copy({.src = host, .dst = d});
  return d;
}

Tensor CaseBuilder::in_i32(const std::vector<int32_t>& v) {
  return in(Tensor::from_i32({static_cast<int64_t>(v.size())}, v));
}

Tensor CaseBuilder::out(const Shape& shape, DType dt) {
  Tensor h = Tensor::empty(shape, dt);
  std::memset(h.data(), 0xff, h.nbytes());
  Tensor d = be_.alloc(shape, dt);
  be_.copy({.src = h, .dst = d});
  c_.bytes += static_cast<double>(h.nbytes());
  c_.outputs.push_back(d);
  return d;
}

Tensor CaseBuilder::out_cols(int64_t rows, int64_t width, DType dt, int64_t begin, int64_t end) {
  Tensor wide = out({rows, width}, dt);
  c_.bytes -= static_cast<double>(wide.nbytes());
  Tensor v = wide.slice_cols(begin, end);
  c_.bytes += static_cast<double>(v.nbytes());
  c_.outputs.back() = v;
  return v;
}

Tensor CaseBuilder::inout(const Tensor& host) {
  Tensor d = in(host);
  c_.bytes += static_cast<double>(host.nbytes());
  c_.outputs.push_back(d);
  return d;
}

// The helpers the entry files share (ops_table.h).
std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t v : d) s = s.empty() ? str_cat(v) : str_cat(s, "x", v);
  return s;
}

Groups three_groups(int64_t a, int64_t b, int64_t rows) {
  Groups g;
  g.cu = {0, a, b, rows};
  g.count = 3;
  return g;
}

std::vector<int32_t> permutation(CaseBuilder& b, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (size_t i = p.size(); i > 1; --i) std::swap(p[i - 1], p[b.next() % i]);
  return p;
}

namespace {

constexpr DType kBf16 = DType::BF16;
constexpr DType kF32 = DType::F32;

/// `n` indices drawn from [0, range) (repeats allowed).
std::vector<int32_t> draws(CaseBuilder& b, int64_t n, int64_t range) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& i : v) i = static_cast<int32_t>(b.next() % static_cast<uint64_t>(range));
  return v;
}

OpEntry rms_norm_entry(int64_t t, int64_t d, int64_t heads, bool slice, bool f32_out = false) {
  const std::string s = dims({t, heads * d}) + (heads > 1 ? " f32 col-slice -> bf16, " + std::to_string(heads) +
                                                                 " heads, 3 groups"
                                                           : f32_out ? " bf16 -> f32, 3 groups"
                                                                     : " bf16 -> bf16, 3 groups");
  return {"rms_norm", s, exact(), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const int64_t w = heads * d, wide = slice ? 3 * w : w;
            Tensor xs = b.in(b.uniform({t, wide}, slice ? kF32 : kBf16, -5.f, 5.f));
            Tensor x = slice ? xs.slice_cols(w, 2 * w) : xs;
            Tensor wt = b.in(b.uniform({3 * d}, kF32, -0.17f, 0.17f)), y = b.out({t, w}, f32_out ? kF32 : kBf16);
            const RmsNormParams p{.x = x, .w = wt, .y = y, .groups = three_groups(t / 2, t * 3 / 4, t), .heads = heads};
            return b.done([&be, p] { be.rms_norm(p); });
          }};
}

OpEntry linear_entry(int64_t t, int64_t in, int64_t out, int groups, bool f32_bias) {
  const std::string s = dims({t, in}) + " -> " + std::to_string(out) + (f32_bias ? " f32 + bias" : " bf16") +
                        (groups == 3 ? ", 3 groups, into a column slice" : "");
  const Tolerance tol = f32_bias ? rel_rms(1e-6, 1e-4, true) : ulps(1);
  return {"linear", s, tol, 2.0 * t * in * out, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const DType dt = f32_bias ? kF32 : kBf16;
            Tensor x = b.in(b.uniform({t, in}, dt, -1.7f, 1.7f));
            Tensor w = b.in(b.uniform({groups * out, in}, dt, -0.035f, 0.035f));
            Tensor bias = f32_bias ? b.in(b.uniform({out}, kF32, -1.f, 1.f)) : Tensor();
            Tensor y = groups == 3 ? b.out_cols(t, out + 64, dt, 64, 64 + out) : b.out({t, out}, dt);
            const Groups g = groups == 3 ? three_groups(t / 2, t * 6 / 7, t) : Groups::single(t);
            const LinearParams p{.x = x, .w = w, .bias = bias, .y = y, .groups = g};
            return b.done([&be, p] { be.linear(p); });
          }};
}

// FP8 linear (LinearParams::w_scale, `--linear-compute fp8`): the weight
// block-quantised on the host per modality, against the CPU's W8A8 reference;
// the device's blockwise GEMM differs in its fp32 order inside a K-block.
OpEntry linear_fp8_entry(int64_t t, int64_t in, int64_t out, int groups) {
  const std::string s = dims({t, in}) + " -> " + std::to_string(out) + " FP8 W8A8" +
                        (groups == 3 ? ", 3 groups, into a column slice" : "");
  return {"linear", s, rel_rms(4e-3, 0.05), 2.0 * t * in * out, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor x = b.in(b.uniform({t, in}, kBf16, -1.7f, 1.7f));
            const Tensor w = b.uniform({groups, out, in}, kBf16, -0.035f, 0.035f);
            const Fp8Blocks q = quantize_fp8_blocks(w, "linear.w");
            Tensor y = groups == 3 ? b.out_cols(t, out + 128, kBf16, 128, 128 + out) : b.out({t, out}, kBf16);
            const Groups g = groups == 3 ? three_groups(t / 2, t * 6 / 7, t) : Groups::single(t);
            const LinearParams p{.x = x, .w = b.in(q.q.reshape({groups * out, in})), .y = y, .groups = g,
                                 .w_scale = b.in(q.scale_inv)};
            return b.done([&be, p] { be.linear(p); });
          }};
}

// rms_norm with its FP8 rows (RmsNormParams::y8, what the FP8 linears reading
// xn take): y, the e4m3 rows and their scales all bit-exact. 384 columns: the
// last iteration of the one-pass kernel holds one group, not two.
OpEntry rms_norm_fp8_entry(int64_t t, int64_t d) {
  return {"rms_norm", dims({t, d}) + " bf16 -> bf16 + FP8 rows, 3 groups", exact(), 0,
          [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor x = b.in(b.uniform({t, d}, kBf16, -5.f, 5.f));
            Tensor wt = b.in(b.uniform({3 * d}, kF32, -0.17f, 0.17f)), y = b.out({t, d}, kBf16);
            const Fp8Rows y8{b.out({t, d}, DType::F8E4M3), b.out({t, d / kFp8ActGroup}, kF32)};
            const RmsNormParams p{.x = x, .w = wt, .y = y, .groups = three_groups(t / 2, t * 3 / 4, t), .y8 = y8};
            return b.done([&be, p] { be.rms_norm(p); });
          }};
}

// The FP8 linear given its input's FP8 rows by the producer (LinearParams::x8;
// rms_norm's y8 made once before the timed op): the CPU ignores x8 and
// quantises x itself, the device takes x8 as it is (cuBLASLt: its scales regrouped).
OpEntry linear_fp8_x8_entry(int64_t t, int64_t in, int64_t out) {
  const std::string s = dims({t, in}) + " -> " + std::to_string(out) + " FP8 W8A8, x8 from rms_norm, 3 groups";
  return {"linear", s, rel_rms(4e-3, 0.05), 2.0 * t * in * out, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor x0 = b.in(b.uniform({t, in}, kBf16, -3.f, 3.f));
            Tensor nw = b.in(b.uniform({in}, kF32, -0.17f, 0.17f));
            Tensor x = be.alloc({t, in}, kBf16);
            const Fp8Rows x8{be.alloc({t, in}, DType::F8E4M3), be.alloc({t, in / kFp8ActGroup}, kF32)};
            be.rms_norm({.x = x0, .w = nw, .y = x, .groups = Groups::single(t), .y8 = x8});
            const Tensor w = b.uniform({3, out, in}, kBf16, -0.035f, 0.035f);
            const Fp8Blocks q = quantize_fp8_blocks(w, "linear.w");
            Tensor y = b.out_cols(t, out + 128, kBf16, 128, 128 + out);
            const LinearParams p{.x = x, .w = b.in(q.q.reshape({3 * out, in})), .y = y,
                                 .groups = three_groups(t / 2, t * 6 / 7, t), .w_scale = b.in(q.scale_inv), .x8 = x8};
            return b.done([&be, p] { be.linear(p); });
          }};
}

/// The sampler ops (spec pipeline §4-5) on latents of n f32 elements; every one bit-exact.
std::vector<OpEntry> sampler_entries(int64_t n, const std::string& what) {
  std::vector<OpEntry> e;
  e.push_back({"copy_elems", what + ", permuted source", exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const CopyElemsParams p{.src = b.in(b.uniform({n}, kF32, -3.f, 3.f)),
                                         .dst = b.inout(b.uniform({n}, kF32, -1.f, 1.f)),
                                         .src_index = b.in_i32(permutation(b, n))};
                 return b.done([&be, p] { be.copy_elems(p); });
               }});
  e.push_back({"cfg_combine", what + ", scale 5", exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const CfgCombineParams p{.pred = b.in(b.uniform({2, n}, kF32, -3.f, 3.f)), .v = b.out({n}, kF32),
                                          .scale = 5.f};
                 return b.done([&be, p] { be.cfg_combine(p); });
               }});
  for (const int step : {0, 3}) {  // step 0: predictor only; step 3: UniC corrector and order 2
    e.push_back({"flow_unipc_step", str_cat(what, ", step ", step, " of 7, shift 7"), exact(), 0,
                 [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   FlowUniPC sched;
                   sched.set_timesteps(7, 7.0);
                   const std::vector<UniPcStepCoef> rows = sched.step_table();
                   Tensor coef = Tensor::empty({static_cast<int64_t>(rows.size()), 16}, kF32);
                   std::memcpy(coef.data(), rows.data(), rows.size() * sizeof(UniPcStepCoef));
                   Tensor sample = b.inout(b.uniform({n}, kF32, -3.f, 3.f)), v = b.in(b.uniform({n}, kF32, -3.f, 3.f));
                   Tensor last = b.inout(b.uniform({n}, kF32, -3.f, 3.f)), m0 = b.inout(b.uniform({n}, kF32, -3.f, 3.f));
                   const FlowUniPCStepParams p{.sample = sample, .v = v, .last = last, .m0 = m0,
                                               .m1 = b.inout(b.uniform({n}, kF32, -3.f, 3.f)), .coef = b.in(coef),
                                               .step = b.in_i32({step})};
                   return b.done([&be, p] { be.flow_unipc_step(p); });
                 }});
  }
  e.push_back({"nonfinite_check", what + ", one NaN", exact(), 0, [=](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 Tensor x = b.uniform({n}, kF32, -3.f, 3.f);
                 x.data_as<float>()[n / 3] = std::numeric_limits<float>::quiet_NaN();
                 const int32_t none = std::numeric_limits<int32_t>::max();
                 const NonfiniteCheckParams p{.x = b.in(x), .first = b.inout(Tensor::from_i32({2}, {none, none})),
                                              .step = b.in_i32({4}), .slot = 1};
                 return b.done([&be, p] { be.nonfinite_check(p); });
               }});
  return e;
}

/// fill_rows and advance_step: the step counter's ops (tiny; launch-bound).
std::vector<OpEntry> step_counter_entries() {
  std::vector<OpEntry> e;
  e.push_back({"fill_rows", "table 7x1024, step 3, 512 of 2048 rows", exact(), 0, [](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const FillRowsParams p{.table = b.in(b.uniform({7, 1024}, kF32, -1.f, 1.f)), .step = b.in_i32({3}),
                                        .rows = b.in_i32(draws(b, 512, 2048)),
                                        .out = b.inout(b.uniform({2048, 1024}, kF32, -1.f, 1.f))};
                 return b.done([&be, p] { be.fill_rows(p); });
               }});
  e.push_back({"advance_step", "counter [1] i32 from 41", exact(), 0, [](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 const AdvanceStepParams p{.step = b.inout(Tensor::from_i32({1}, {41}))};
                 return b.done([&be, p] { be.advance_step(p); });
               }});
  return e;
}

}  // namespace

std::vector<OpEntry> backend_op_table() {
  std::vector<OpEntry> t;
  t.push_back(rms_norm_entry(2048, 3072, 1, false));
  t.push_back(rms_norm_entry(333, 5120, 1, false, true));
  t.push_back(rms_norm_entry(700, 128, 24, true));
  t.push_back(rms_norm_fp8_entry(2048, 3072));
  t.push_back(rms_norm_fp8_entry(333, 384));

  t.push_back(linear_entry(2048, 3072, 3072, 1, false));
  t.push_back(linear_entry(640, 3072, 1536, 3, false));
  t.push_back(linear_entry(200, 5120, 768, 1, true));
  t.push_back(linear_fp8_entry(512, 3072, 1024, 1));
  t.push_back(linear_fp8_entry(640, 1280, 3072, 3));
  t.push_back(linear_fp8_x8_entry(1024, 3072, 2048));

  // swiglu7: with MAGI2_SWIGLU7_KERNEL=fused (the default) the sigmoid runs on the SFU, a few fp32 ulp
  // from the CPU's, so a rare element is one bf16 ulp off (and its FP8 group may move with it); the
  // "reference kernel" rows run the CPU's bytes, where the exp is the one operation not IEEE-exact on both
  // sides: a handful of 1-ulp outputs allowed (with FP8 rows a differing z element can move its whole
  // 1 x 128 group, so the allowance is 3 groups).
  const bool sfu = cuda::fused_selected("MAGI2_SWIGLU7_KERNEL");
  for (const bool ref : {false, true}) {
    if (ref && !sfu) break;  // the plain rows run the reference kernel already
    const bool exact_bytes = ref || !sfu;
    const std::string k = ref ? ", reference kernel" : "";
    const auto run = [ref](Backend& be, const SwiGLU7Params& p) {
      if (ref && be.device() == Device::CUDA)
        cuda::swiglu7(p, static_cast<cudaStream_t>(cuda_stream_of(be)), false);
      else
        be.swiglu7(p);
    };
    t.push_back({"swiglu7", "2048x16384 -> 2048x8192, beyond the +-7 clamps" + k,
                 exact_bytes ? exact(3) : rel_rms(2e-4, 0.01, true), 0, [=](Backend& be, uint64_t s) {
                   CaseBuilder b(be, s);
                   const SwiGLU7Params p{.u = b.in(b.uniform({2048, 16384}, kBf16, -7.f, 7.f)),
                                         .z = b.out({2048, 8192}, kBf16)};
                   return b.done([&be, p, run] { run(be, p); });
                 }});
    t.push_back({"swiglu7", "2048x5120 -> 2048x2560 + FP8 rows in column slices" + k,
                 exact_bytes ? exact(3 * 129) : rel_rms(2e-3, 0.08, true), 0, [=](Backend& be, uint64_t s) {
                   CaseBuilder b(be, s);
                   const SwiGLU7Params p{.u = b.in(b.uniform({2048, 5120}, kBf16, -7.f, 7.f)),
                                         .z = b.out({2048, 2560}, kBf16),
                                         .z8 = {b.out_cols(2048, 2560 + 128, DType::F8E4M3, 128, 128 + 2560),
                                                b.out_cols(2048, 21, kF32, 1, 21)}};
                   return b.done([&be, p, run] { run(be, p); });
                 }});
  }

  for (const auto& [rows, width, begin, dt] : {std::tuple<int64_t, int64_t, int64_t, DType>{2048, 3072, 64, kBf16},
                                               {500, 33, 1, kBf16}, {500, 96, 0, kF32}}) {
    const std::string s = dims({rows, width}) + (dt == kBf16 ? " bf16" : " f32") + " of 2100 rows" +
                          (begin ? ", column slice" : "") + ", repeats";
    t.push_back({"gather_rows", s, exact(), 0, [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   Tensor src = b.in(b.uniform({2100, width + 2 * begin}, dt, -2.f, 2.f));
                   const GatherRowsParams p{.src = src.slice_cols(begin, begin + width), .dst = b.out({rows, width}, dt),
                                            .index = b.in_i32(draws(b, rows, 2100))};
                   return b.done([&be, p] { be.gather_rows(p); });
                 }});
  }

  t.push_back({"rope_table", "8x16x28 video + 3 tokens, 16 bands (fp32 sin/cos)", ulps(1), 0,
               [](Backend& be, uint64_t) {
                 CaseBuilder b(be, 0);
                 std::vector<float> bv(16);
                 for (size_t i = 0; i < bv.size(); ++i) bv[i] = 3.14159265f * std::pow(2.0f, 0.5f * float(i) - 2.0f);
                 Tensor coords = b.in(video_coords(8, 16, 28, {8, 32, 56}));
                 const RopeTableParams p{.coords = coords, .bands = b.in(Tensor::from_f32({16}, bv)),
                                         .out = b.out({coords.size(0), 96}, kF32)};
                 return b.done([&be, p] { be.rope_table(p); });
               }});

  for (const auto& [rows, permuted] : {std::pair<int64_t, bool>{2048, true}, {1500, false}}) {
    const std::string s = dims({rows, 24, 128}) + " f32 -> bf16, 16 bands" + (permuted ? ", permuted rows" : "");
    t.push_back({"rope", s, exact(), 0, [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   Tensor x = b.in(b.uniform({rows, 24, 128}, kF32, -3.5f, 3.5f));
                   Tensor table = b.in(b.uniform({rows, 96}, kF32, -1.f, 1.f));  // any values: pure fp32 arithmetic
                   Tensor src_rows = permuted ? b.in_i32(permutation(b, rows)) : Tensor();
                   const RopeParams p{.x = x, .table = table, .out = b.out({rows, 24, 128}, kBf16), .src_rows = src_rows};
                   return b.done([&be, p] { be.rope(p); });
                 }});
  }

  for (OpEntry& e : attention_op_entries()) t.push_back(std::move(e));


  // gate: the exp (the gate's sigmoid) is the one operation not IEEE-exact on both sides: a handful of 1-ulp outputs.
  t.push_back({"gate", "2048x24x128 in place, g a column slice", exact(3), 0, [](Backend& be, uint64_t s) {
                 CaseBuilder b(be, s);
                 Tensor o = b.inout(b.uniform({2048, 24, 128}, kBf16, -3.5f, 3.5f));
                 Tensor g = b.in(b.uniform({2048, 3096}, kBf16, -5.f, 5.f));
                 const GateParams p{.o = o, .g = g.slice_cols(3072, 3096)};
                 return b.done([&be, p] { be.gate(p); });
               }});

  for (const auto& [rows, dt] : {std::pair<int64_t, DType>{2048, kBf16}, {513, kF32}}) {
    const std::string s = dims({rows, 3072}) + (dt == kBf16 ? " bf16" : " f32");
    t.push_back({"add", s, exact(), 0, [=](Backend& be, uint64_t seed) {
                   CaseBuilder b(be, seed);
                   const AddParams p{.a = b.in(b.uniform({rows, 3072}, dt, -7.f, 7.f)),
                                     .b = b.in(b.uniform({rows, 3072}, dt, -1.7f, 1.7f)),
                                     .out = b.out({rows, 3072}, dt)};
                   return b.done([&be, p] { be.add(p); });
                 }});
  }
  // With a third term (AddParams::c; the MoE's last op): out = bf16(a + bf16(b + c)), c a column slice.
  t.push_back({"add", dims({2048, 3072}) + " bf16 + c (3 terms)", exact(), 0, [](Backend& be, uint64_t seed) {
                 CaseBuilder b(be, seed);
                 Tensor c = b.in(b.uniform({2048, 3080}, kBf16, -2.f, 2.f));
                 const AddParams p{.a = b.in(b.uniform({2048, 3072}, kBf16, -7.f, 7.f)),
                                   .b = b.in(b.uniform({2048, 3072}, kBf16, -1.7f, 1.7f)),
                                   .out = b.out({2048, 3072}, kBf16), .c = c.slice_cols(8, 3080)};
                 return b.done([&be, p] { be.add(p); });
               }});

  t.push_back({"copy_cols", "2048x128 f32 into columns [256, 384) of 2048x9216", exact(), 0,
               [](Backend& be, uint64_t s) {
                 CaseBuilder b(be, s);
                 const CopyColsParams p{.src = b.in(b.uniform({2048, 128}, kF32, -1.f, 1.f)),
                                        .dst = b.inout(b.uniform({2048, 9216}, kF32, -1.f, 1.f)), .col_begin = 256};
                 return b.done([&be, p] { be.copy_cols(p); });
               }});
  t.push_back({"copy", "2048x3072 bf16 column slice -> contiguous, on the device", exact(), 0,
               [](Backend& be, uint64_t s) {
                 CaseBuilder b(be, s);
                 Tensor src = b.in(b.uniform({2048, 3200}, kBf16, -2.f, 2.f));
                 const CopyParams p{.src = src.slice_cols(100, 3172), .dst = b.out({2048, 3072}, kBf16)};
                 return b.done([&be, p] { be.copy(p); });
               }});
  for (const DType from : {kF32, kBf16}) {
    const DType to = from == kF32 ? kBf16 : kF32;
    t.push_back({"cast", from == kF32 ? "2048x3072 f32 -> bf16" : "2048x3072 bf16 -> f32", exact(), 0,
                 [=](Backend& be, uint64_t s) {
                   CaseBuilder b(be, s);
                   const CastParams p{.src = b.in(b.uniform({2048, 3072}, from, -170.f, 170.f)),
                                      .dst = b.out({2048, 3072}, to)};
                   return b.done([&be, p] { be.cast(p); });
                 }});
  }

  for (OpEntry& e : mhc_moe_op_entries()) t.push_back(std::move(e));

  for (OpEntry& e : sampler_entries(2048 * 192, "2048x192 latent elements")) t.push_back(std::move(e));
  for (OpEntry& e : sampler_entries(100003, "100003 elements (odd)")) t.push_back(std::move(e));
  for (OpEntry& e : step_counter_entries()) t.push_back(std::move(e));
  for (OpEntry& e : text_encoder_op_entries()) t.push_back(std::move(e));
  for (OpEntry& e : codec_op_entries()) t.push_back(std::move(e));
  return t;
}

}  // namespace magi2::test
