#include "models/magi2_dit/workspace.h"

#include <algorithm>

#include "ops/numerics.h"

namespace magi2 {

namespace {

// Views start on 256-byte boundaries (the widest vector load and the GEMM
// libraries' alignment).
constexpr size_t kAlign = 256;

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

size_t bytes_of(const Shape& s, DType t) {
  size_t n = dtype_size(t);
  for (int64_t d : s) n *= static_cast<size_t>(d);
  return n;
}

// Lays views out one after another in one backing buffer: `carve` first
// counts (no buffer yet), then hands out views at the same offsets.
class Layout {
 public:
  explicit Layout(const Tensor* backing = nullptr, size_t base = 0) : backing_(backing), at_(base) {}
  Tensor carve(const Shape& s, DType t) {
    const size_t off = at_;
    at_ += aligned(bytes_of(s, t));
    if (!backing_ || !backing_->defined()) return Tensor();
    auto* p = static_cast<uint8_t*>(backing_->data()) + off;
    return Tensor::view_of(p, s, t, backing_->owner(), backing_->device());
  }
  size_t end() const { return at_; }

 private:
  const Tensor* backing_;
  size_t at_;
};

}  // namespace

DitWorkspace::DitWorkspace(const DitArch& a, int64_t n_tokens, int64_t c_pad, Backend& backend, bool fp8_rows)
    : DitWorkspace(a, n_tokens, c_pad, [&backend](const Shape& s, DType t) { return backend.alloc(s, t); },
                   fp8_rows) {}

size_t DitWorkspace::planned_bytes(const DitArch& a, int64_t n_tokens, int64_t c_pad, bool fp8_rows) {
  // The same layout with an allocator that hands out nothing: only the sizes count.
  return DitWorkspace(a, n_tokens, c_pad, [](const Shape&, DType) { return Tensor(); }, fp8_rows).bytes;
}

DitWorkspace::DitWorkspace(const DitArch& a, int64_t n_tokens, int64_t c_pad, const Alloc& alloc, bool fp8_rows)
    : n(n_tokens) {
  const int64_t n = n_tokens;
  const int64_t d = a.hidden_size, vw = a.virtual_width(), h = a.num_heads_q(), hd = a.head_dim;
  const int64_t di = a.dense_intermediate();
  const int64_t sh = a.moe_shared_expert_intermediate_size + a.moe_modality_specific_expert_intermediate_size;
  const int64_t mh = a.moe_num_heads, top_k = a.moe_top_k;
  const bool moe = !a.moe_layers.empty();
  const DType F = DType::F32, B = DType::BF16;
  const bool rows8 = fp8_rows && d % kFp8ActGroup == 0;
  // xn and its FP8 rows open every layer phase at the same offsets: one view for all phases.
  auto norm_out = [&](Layout& L) {
    Tensor t = L.carve({n, d}, B);
    if (rows8) {
      Tensor q = L.carve({n, d}, DType::F8E4M3), sc = L.carve({n, d / kFp8ActGroup}, F);
      if (t.defined()) xn8 = {q, sc};
    }
    return t;
  };

  // Two passes over the same layout: the first counts the bytes of the
  // persistent part and of each phase, the second carves the views out of one
  // buffer. Phases that never overlap in time share the scratch part: the
  // adapters (h0 before the layers, fin after them), and within a layer the
  // attention branch, the dense MLP and the MoE (each branch's temporaries are
  // dead once its output is in branch_out). Every buffer of one phase is
  // disjoint from the others of that phase.
  auto persistent = [&](Layout& L) {
    x_p = L.carve({n, c_pad}, F);
    temb_p = L.carve({n, 64}, F);
    rope = L.carve({n, 6 * a.rope_bands()}, F);
    state = L.carve({n, vw}, B);
    logits = L.carve({n, 24}, F);
    ss = L.carve({n}, F);
    h_pre = L.carve({n, 4}, F);
    h_post = L.carve({n, 4}, F);
    h_res = L.carve({n, 16}, F);
    branch_in = L.carve({n, d}, B);
    branch_out = L.carve({n, d}, B);
    if (moe) {  // the routing stays readable after the layer (dumps, forced routing)
      topk_idx = L.carve({mh, n, top_k}, DType::I32);
      topk_w = L.carve({mh, n, top_k}, F);
      margin = L.carve({mh, n}, F);
      forced = L.carve({mh, n, top_k}, DType::I32);
    }
    out_p = L.carve({n, a.out_channels()}, F);
    out = L.carve({n, a.out_channels()}, F);
  };
  auto adapters = [&](Layout& L) {
    Layout second = L;
    h0 = L.carve({n, vw}, F);
    fin = second.carve({n, vw}, F);
    return std::max(L.end(), second.end());
  };
  auto attention = [&](Layout& L) {
    xn = norm_out(L);
    g = L.carve({n, h}, B);
    qkv = L.carve({n, 3 * d}, B);
    lse = L.carve({n, h}, F);
    q = L.carve({n, h, hd}, B);
    k = L.carve({n, h, hd}, B);
    v = L.carve({n, h, hd}, B);
    o = L.carve({n, h, hd}, B);
    o_p = L.carve({n, h, hd}, B);
    return L.end();
  };
  auto dense = [&](Layout& L) {
    norm_out(L);  // xn, xn8 (the attention phase's views: the same offsets)
    u = L.carve({n, 2 * di}, B);
    z = L.carve({n, di}, B);
    return L.end();
  };
  auto experts = [&](Layout& L) {
    if (!moe) return L.end();
    norm_out(L);  // xn, xn8
    r = L.carve({n, d}, B);
    routed = L.carve({n, d}, B);
    merged = L.carve({n, d}, B);
    su = L.carve({n, 2 * sh}, B);
    sz = L.carve({n, sh}, B);
    s2 = L.carve({n, d}, B);
    m2 = L.carve({n, d}, B);
    return L.end();
  };
  auto lay_out = [&](const Tensor* backing) {
    Layout p(backing);
    persistent(p);
    const size_t base = p.end();
    Layout la(backing, base), lb(backing, base), lc(backing, base), ld(backing, base);
    return std::max({adapters(la), attention(lb), dense(lc), experts(ld)});
  };
  bytes = lay_out(nullptr);
  const Tensor backing = alloc({static_cast<int64_t>(bytes)}, DType::U8);
  if (backing.defined()) lay_out(&backing);
  if (xn8.defined() && moe && sh % kFp8ActGroup == 0 && sh <= d) {
    const auto as = [&](const Tensor& t, const Shape& shape) {
      return Tensor::view_of(t.data(), shape, t.dtype(), t.owner(), t.device());
    };
    sz8 = {as(xn8.q, {n, sh}), as(xn8.scale, {n, sh / kFp8ActGroup})};
  }
}

}  // namespace magi2
