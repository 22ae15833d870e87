// The fused attention glue ops (attn_qkv, attention with a deferred sink +
// attn_out) on the CPU backend give the bytes of the unfused op sequence the
// DiT ran before (rms_norm + rope + gather_rows; attention + gather_rows +
// gate), so switching Dit::attention to them changes no reference output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "ops_reference.h"

namespace magi2 {
namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

std::vector<int32_t> shuffled(int64_t n, Rng& g) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), g);
  return p;
}

TEST(AttnGlue, QkvProducerEqualsUnfusedSequence) {
  Rng g(11);
  auto be = make_cpu_backend(2);
  const int64_t t = 97, h = 3, hd = 64, nb = 5, d = h * hd;
  Groups gr;
  gr.cu = {0, 50, 90, t};
  gr.count = 3;
  Tensor wide = rand_t({t, 3 * d + 4}, DType::BF16, g, -3, 3);
  const Tensor qkv = wide.slice_cols(4, 4 + 3 * d);
  Tensor qn = rand_t({3 * hd}, DType::F32, g, -1, 1), kn = rand_t({3 * hd}, DType::F32, g, -1, 1);
  Tensor table = rand_t({t, 6 * nb}, DType::F32, g, -1, 1);
  const Tensor rows = i32(shuffled(t, g));
  // Unfused: what Dit::attention ran before.
  Tensor qf = Tensor::empty({t, h, hd}, DType::F32), kf = Tensor::empty({t, h, hd}, DType::F32);
  Tensor q0 = Tensor::empty({t, h, hd}, DType::BF16), k0 = Tensor::empty(q0.shape(), DType::BF16);
  Tensor v0 = Tensor::empty(q0.shape(), DType::BF16);
  be->rms_norm({.x = qkv.slice_cols(0, d), .w = qn, .y = qf.reshape({t, d}), .groups = gr, .heads = h});
  be->rms_norm({.x = qkv.slice_cols(d, 2 * d), .w = kn, .y = kf.reshape({t, d}), .groups = gr, .heads = h});
  be->rope({.x = qf, .table = table, .out = q0, .src_rows = rows});
  be->rope({.x = kf, .table = table, .out = k0, .src_rows = rows});
  be->gather_rows({.src = qkv.slice_cols(2 * d, 3 * d), .dst = v0.reshape({t, d}), .index = rows});
  Tensor q1 = Tensor::empty(q0.shape(), DType::BF16), k1 = Tensor::empty(q0.shape(), DType::BF16);
  Tensor v1 = Tensor::empty(q0.shape(), DType::BF16);
  be->attn_qkv({.qkv = qkv, .q_norm = qn, .k_norm = kn, .table = table, .src_rows = rows, .q = q1, .k = k1,
                .v = v1, .groups = gr});
  EXPECT_TRUE(same_bytes(q1, q0));
  EXPECT_TRUE(same_bytes(k1, k0));
  EXPECT_TRUE(same_bytes(v1, v0));
}

TEST(AttnGlue, DeferredSinkAndConsumerEqualUnfusedSequence) {
  Rng g(12);
  auto be = make_cpu_backend(2);
  const std::vector<int32_t> cu = {0, 1, 1, 40, 113};  // a 1-token and an empty sample
  const int64_t t = cu.back(), h = 4, hd = 64;
  Tensor q = rand_t({t, h, hd}, DType::BF16, g, -3, 3), k = rand_t({t, h, hd}, DType::BF16, g, -3, 3);
  Tensor v = rand_t({t, h, hd}, DType::BF16, g, -1, 1);
  Tensor sinks = rand_t({h + 2}, DType::F32, g, -2, 6);
  sinks.data_as<float>()[3] = 50.f;  // a sink that swallows the softmax of one head
  Tensor gw = rand_t({t, h + 3}, DType::BF16, g, -4, 4);
  const Tensor gate = gw.slice_cols(3, 3 + h);
  const Tensor perm = i32(shuffled(t, g));
  const float scale = 0.125f;
  // Unfused: attention with the sink, gather back, gate.
  Tensor o = Tensor::empty({t, h, hd}, DType::BF16), want = Tensor::empty(o.shape(), DType::BF16);
  be->attention({.q = q, .k = k, .v = v, .sinks = sinks, .o = o, .cu_seqlens = i32(cu), .scale = scale,
                 .head_begin = 2});
  be->gather_rows({.src = o.reshape({t, h * hd}), .dst = want.reshape({t, h * hd}), .index = perm});
  be->gate({.o = want, .g = gate});
  // Fused: deferred sink, then one consumer op.
  Tensor raw = Tensor::empty(o.shape(), DType::BF16), lse = Tensor::empty({t, h}, DType::F32);
  Tensor got = Tensor::empty(o.shape(), DType::BF16);
  be->attention({.q = q, .k = k, .v = v, .sinks = sinks, .o = raw, .cu_seqlens = i32(cu), .scale = scale,
                 .head_begin = 2, .lse = lse});
  be->attn_out({.o = raw, .lse = lse, .sinks = sinks, .head_begin = 2, .g = gate, .src_rows = perm, .out = got});
  EXPECT_TRUE(same_bytes(got, want));
  // The 1-token sample (token 0) has one key: its lse is the scaled q.k itself.
  double qk = 0;
  for (int64_t i = 0; i < hd; ++i) qk += at(q, i) * at(k, i);
  EXPECT_NEAR(at(lse, 0), scale * qk, 1e-4);
  // Without lse the consumer is gather + gate alone.
  Tensor got2 = Tensor::empty(o.shape(), DType::BF16);
  be->attn_out({.o = o, .g = gate, .src_rows = perm, .out = got2});
  EXPECT_TRUE(same_bytes(got2, want));
  // Bad input: one clear error naming the tensor.
  EXPECT_TRUE(test::throws_with([&] { be->attn_out({.o = raw, .lse = lse, .g = gate, .src_rows = perm, .out = got}); },
                                {"attn_out.sinks"}));
  EXPECT_TRUE(test::throws_with([&] { be->attn_out({.o = raw, .g = gate, .src_rows = perm, .out = raw}); },
                                {"attn_out.out", "alias"}));
}

}  // namespace
}  // namespace magi2
