// Block-sparse (range-list) attention for the refiner's window layers (ops.h
// BlockSparseAttentionParams; docs/refiner.md §5). Pairs sharing one q range
// are gathered into one key list (the union of their k ranges, in pair order),
// widened once per kv head, and run through the same score / softmax / P*V
// tiles as the dense attention, so the bytes match `attention` whenever the
// key list is one contiguous range.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/attn_tiles.h"
#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/block_ranges.h"

namespace magi2::cpu {

namespace {

constexpr int kBlockQ = 16;  // queries sharing one score buffer

}  // namespace

void block_sparse_attention(const BlockSparseAttentionParams& p) {
  for (const Tensor* x : {&p.q, &p.k, &p.v, &p.o})
    MAGI2_CHECK(x->defined() && x->dim() == 3 && x->is_contiguous() && x->dtype() == DType::BF16 &&
                    x->device() == Device::CPU,
                "block_sparse_attention: q, k, v, o must be contiguous host bf16 [T, H, hd]");
  const int64_t t = p.q.size(0), hq = p.q.size(1), hd = p.q.size(2), hk = p.k.size(1);
  MAGI2_CHECK(p.o.shape() == p.q.shape(), "block_sparse_attention: o ", shape_str(p.o.shape()), " must match q ",
              shape_str(p.q.shape()));
  MAGI2_CHECK(p.k.shape() == p.v.shape() && p.k.size(0) == t && p.k.size(2) == hd && hk > 0 && hq % hk == 0,
              "block_sparse_attention: k/v ", shape_str(p.k.shape()), " do not fit q ", shape_str(p.q.shape()),
              " (same tokens and head dim, q heads a multiple of kv heads)");
  const auto groups = group_block_sparse_pairs(p.q_ranges, p.k_ranges, t);
  const uint16_t* q = p.q.data_as<uint16_t>();
  const uint16_t* k = p.k.data_as<uint16_t>();
  const uint16_t* v = p.v.data_as<uint16_t>();
  uint16_t* o = p.o.data_as<uint16_t>();
  std::fill(o, o + p.o.numel(), uint16_t{0});  // rows no pair covers
  const int64_t rep = hq / hk;

  // Key lists per q range (the union of its k ranges in pair order).
  std::vector<std::vector<int32_t>> keys(groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (const TokenRange& r : groups[gi].second)
      for (int32_t j = r.begin; j < r.end; ++j) keys[gi].push_back(j);
  // One parallel region over (q range, head): the refiner has thousands of
  // small q ranges, so per-range regions would cost more than the math.
  const int64_t items = static_cast<int64_t>(groups.size()) * hq;
#pragma omp parallel
  {
    std::vector<float> kt, vf, s, qf(kBlockQ * hd), acc(kTileQ * hd);
    float mx[kBlockQ], sum[kBlockQ];
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const size_t gi = static_cast<size_t>(item / hq);
      const int64_t h = item % hq, kh = h / rep;
      const TokenRange qrange = groups[gi].first;
      const std::vector<int32_t>& kl = keys[gi];
      const int64_t len = static_cast<int64_t>(kl.size());
      // This head's keys widened: K transposed [hd][len], V [len][hd].
      kt.resize(static_cast<size_t>(hd * len));
      vf.resize(kt.size());
      s.resize(static_cast<size_t>(kBlockQ * len));
      for (int64_t j = 0; j < len; ++j)
        for (int64_t d = 0; d < hd; ++d) {
          const int64_t src = (static_cast<int64_t>(kl[j]) * hk + kh) * hd + d;
          kt[d * len + j] = bf16_bits_to_f32(k[src]);
          vf[j * hd + d] = bf16_bits_to_f32(v[src]);
        }
      for (int64_t i0 = qrange.begin; i0 < qrange.end; i0 += kBlockQ) {
        const int nq = static_cast<int>(std::min<int64_t>(kBlockQ, qrange.end - i0));
        for (int i = 0; i < nq; ++i)
          for (int64_t d = 0; d < hd; ++d) qf[i * hd + d] = bf16_bits_to_f32(q[((i0 + i) * hq + h) * hd + d]);
        for (int it = 0; it < nq; it += kTileQ)
          for (int64_t j0 = 0; j0 < len; j0 += kTileK)
            score_tile(qf.data() + it * hd, hd, kt.data() + j0, len, std::min(kTileQ, nq - it),
                       static_cast<int>(std::min<int64_t>(kTileK, len - j0)), p.scale, s.data() + it * len + j0, len);
        for (int i = 0; i < nq; ++i) exp_row(s.data() + i * len, len, &mx[i], &sum[i]);
        for (int it = 0; it < nq; it += kTileQ) {
          const int nt = std::min(kTileQ, nq - it);
          pv_tile(s.data() + it * len, len, vf.data(), len, hd, nt, acc.data());
          for (int i = 0; i < nt; ++i) {
            uint16_t* orow = o + ((i0 + it + i) * hq + h) * hd;
            for (int64_t d = 0; d < hd; ++d) orow[d] = f32_to_bf16_bits(acc[i * hd + d] / sum[it + i]);
          }
        }
      }
    }
  }
}

}  // namespace magi2::cpu
