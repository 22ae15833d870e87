// The fused attention glue ops (spec magi2-dit.md §6 steps 4-9) on the CPU
// reference: exactly the unfused op sequence they replace, so the reference's
// bytes do not change when the DiT switches to them (tests/unit check it).
// The scratch tensors are the intermediates the unfused path kept in the
// model's workspace; the CUDA backend fuses them away (src/cuda/attn_glue.cu).
#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {

void attn_qkv(const AttnQkvParams& p) {
  MAGI2_CHECK(p.q.defined() && p.q.dim() == 3, "attn_qkv.q: expected [T, H, hd]");
  const int64_t t = p.q.size(0), h = p.q.size(1), hd = p.q.size(2), d = h * hd;
  for (const Tensor* x : {&p.k, &p.v})
    MAGI2_CHECK(x->defined() && x->shape() == p.q.shape(), "attn_qkv: k and v must have q's shape ",
                shape_str(p.q.shape()));
  check_2d(p.qkv, t, 3 * d, "attn_qkv.qkv");
  Tensor f = Tensor::empty({t, h, hd}, DType::F32);  // the per-head normalised q (then k) in qkv row order
  rms_norm({.x = p.qkv.slice_cols(0, d), .w = p.q_norm, .y = f.reshape({t, d}), .groups = p.groups, .heads = h,
            .eps = p.eps});
  rope({.x = f, .table = p.table, .out = p.q, .src_rows = p.src_rows});
  rms_norm({.x = p.qkv.slice_cols(d, 2 * d), .w = p.k_norm, .y = f.reshape({t, d}), .groups = p.groups,
            .heads = h, .eps = p.eps});
  rope({.x = f, .table = p.table, .out = p.k, .src_rows = p.src_rows});
  gather_rows({.src = p.qkv.slice_cols(2 * d, 3 * d), .dst = p.v.reshape({t, d}), .index = p.src_rows});
}

void attn_out(const AttnOutParams& p) {
  MAGI2_CHECK(p.o.defined() && p.o.dim() == 3 && p.o.is_contiguous() && p.o.dtype() == DType::BF16,
              "attn_out.o: expected contiguous bf16 [T, H, hd]");
  const int64_t t = p.o.size(0), h = p.o.size(1), hd = p.o.size(2), d = h * hd;
  MAGI2_CHECK(p.out.defined() && p.out.shape() == p.o.shape() && p.out.data() != p.o.data(),
              "attn_out.out: expected ", shape_str(p.o.shape()), ", not aliasing o");
  Tensor src = p.o;
  if (p.lse.defined()) {
    MAGI2_CHECK(p.lse.dtype() == DType::F32 && p.lse.is_contiguous() && p.lse.numel() == t * h,
                "attn_out.lse: expected contiguous f32 [", t, ", ", h, "]");
    MAGI2_CHECK(p.sinks.defined() && p.sinks.dtype() == DType::F32 && p.head_begin >= 0 &&
                    p.sinks.numel() >= p.head_begin + h,
                "attn_out.sinks: expected at least ", p.head_begin + h, " f32 values");
    // attention()'s own epilogue: bf16(o_fa * factor) per (token, head).
    src = Tensor::empty(p.o.shape(), DType::BF16);
    const uint16_t* o = p.o.data_as<uint16_t>();
    const float* lse = p.lse.data_as<float>();
    const float* sinks = p.sinks.data_as<float>() + p.head_begin;
    uint16_t* c = src.data_as<uint16_t>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < t * h; ++r) {
      const float factor = sink_factor(lse[r], sinks[r % h]);
      for (int64_t i = 0; i < hd; ++i) c[r * hd + i] = f32_to_bf16_bits(bf16_bits_to_f32(o[r * hd + i]) * factor);
    }
  }
  gather_rows({.src = src.reshape({t, d}), .dst = p.out.reshape({t, d}), .index = p.src_rows});
  gate({.o = p.out, .g = p.g});
  if (p.out8.defined()) write_fp8_rows(p.out.reshape({t, d}), p.out8, "attn_out.out8");
}

}  // namespace magi2::cpu
