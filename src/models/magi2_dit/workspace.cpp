#include "models/magi2_dit/workspace.h"

namespace magi2 {

DitWorkspace::DitWorkspace(const DitArch& a, int64_t n_tokens, int64_t c_pad, Backend& backend)
    : DitWorkspace(a, n_tokens, c_pad, [&backend](const Shape& s, DType t) { return backend.alloc(s, t); }) {}

size_t DitWorkspace::planned_bytes(const DitArch& a, int64_t n_tokens, int64_t c_pad) {
  // The same layout with an allocator that hands out nothing: only the sizes count.
  return DitWorkspace(a, n_tokens, c_pad, [](const Shape&, DType) { return Tensor(); }).bytes;
}

DitWorkspace::DitWorkspace(const DitArch& a, int64_t n_tokens, int64_t c_pad, const Alloc& alloc) : n(n_tokens) {
  // Every buffer goes through `be.alloc`, which also sums its bytes, so the
  // planned count and the allocation can never disagree.
  struct CountingAlloc {
    const Alloc& make;
    size_t& total;
    Tensor alloc(const Shape& s, DType t) const {
      int64_t numel = 1;
      for (int64_t dim : s) numel *= dim;
      total += static_cast<size_t>(numel) * dtype_size(t);
      return make(s, t);
    }
  } be{alloc, bytes};
  const int64_t d = a.hidden_size, vw = a.virtual_width(), h = a.num_heads_q(), hd = a.head_dim;
  const int64_t di = a.dense_intermediate();
  const int64_t sh = a.moe_shared_expert_intermediate_size + a.moe_modality_specific_expert_intermediate_size;
  const int64_t mh = a.moe_num_heads, top_k = a.moe_top_k;
  const DType F = DType::F32, B = DType::BF16;
  x_p = be.alloc({n, c_pad}, F);
  temb_p = be.alloc({n, 64}, F);
  rope = be.alloc({n, 6 * a.rope_bands()}, F);
  h0 = be.alloc({n, vw}, F);
  state = be.alloc({n, vw}, B);
  logits = be.alloc({n, 24}, F);
  h_pre = be.alloc({n, 4}, F);
  h_post = be.alloc({n, 4}, F);
  h_res = be.alloc({n, 16}, F);
  branch_in = be.alloc({n, d}, B);
  branch_out = be.alloc({n, d}, B);
  xn = be.alloc({n, d}, B);
  g = be.alloc({n, h}, B);
  qkv = be.alloc({n, 3 * d}, B);
  lse = be.alloc({n, h}, F);
  q = be.alloc({n, h, hd}, B);
  k = be.alloc({n, h, hd}, B);
  v = be.alloc({n, h, hd}, B);
  o = be.alloc({n, h, hd}, B);
  o_p = be.alloc({n, h, hd}, B);
  u = be.alloc({n, 2 * di}, B);
  z = be.alloc({n, di}, B);
  if (!a.moe_layers.empty()) {
    r = be.alloc({n, d}, B);
    routed = be.alloc({n, d}, B);
    merged = be.alloc({n, d}, B);
    su = be.alloc({n, 2 * sh}, B);
    sz = be.alloc({n, sh}, B);
    s2 = be.alloc({n, d}, B);
    m2 = be.alloc({n, d}, B);
    topk_idx = be.alloc({mh, n, top_k}, DType::I32);
    topk_w = be.alloc({mh, n, top_k}, F);
    margin = be.alloc({mh, n}, F);
    forced = be.alloc({mh, n, top_k}, DType::I32);
  }
  fin = be.alloc({n, vw}, F);
  out_p = be.alloc({n, a.out_channels()}, F);
  out = be.alloc({n, a.out_channels()}, F);
  x_in = be.alloc({n, c_pad}, F);
  coords_in = be.alloc({n, 9}, F);
  temb_in = be.alloc({n, 64}, F);
}

}  // namespace magi2
