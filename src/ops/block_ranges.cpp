#include "ops/block_ranges.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace magi2 {

std::vector<BlockSparseGroup> group_block_sparse_pairs(const Tensor& qr, const Tensor& kr, int64_t t) {
  MAGI2_CHECK(qr.defined() && kr.defined() && qr.device() == Device::CPU && kr.device() == Device::CPU &&
                  qr.dtype() == DType::I32 && kr.dtype() == DType::I32 && qr.dim() == 2 && qr.size(1) == 2 &&
                  qr.shape() == kr.shape() && qr.is_contiguous() && kr.is_contiguous(),
              "block_sparse_attention: q_ranges and k_ranges must be host i32 [P, 2] of one shape, got ",
              shape_str(qr.shape()), " and ", shape_str(kr.shape()));
  const int32_t* q = qr.data_as<int32_t>();
  const int32_t* k = kr.data_as<int32_t>();
  std::map<std::pair<int32_t, int32_t>, std::vector<TokenRange>> by_q;
  for (int64_t p = 0; p < qr.size(0); ++p) {
    const TokenRange a{q[2 * p], q[2 * p + 1]}, b{k[2 * p], k[2 * p + 1]};
    MAGI2_CHECK(a.begin >= 0 && a.begin <= a.end && a.end <= t && b.begin >= 0 && b.begin <= b.end && b.end <= t,
                "block_sparse_attention: pair ", p, " ([", a.begin, ", ", a.end, ") -> [", b.begin, ", ", b.end,
                ")) is outside [0, ", t, "]");
    if (a.begin == a.end || b.begin == b.end) continue;
    by_q[{a.begin, a.end}].push_back(b);
  }
  std::vector<BlockSparseGroup> out;
  int32_t last_end = 0;
  for (auto& [qrange, ks] : by_q) {
    MAGI2_CHECK(qrange.first >= last_end, "block_sparse_attention: q range [", qrange.first, ", ", qrange.second,
                ") overlaps another q range without being equal to it");
    last_end = qrange.second;
    std::vector<TokenRange> sorted = ks;
    std::sort(sorted.begin(), sorted.end(), [](TokenRange x, TokenRange y) { return x.begin < y.begin; });
    for (size_t i = 1; i < sorted.size(); ++i)
      MAGI2_CHECK(sorted[i].begin >= sorted[i - 1].end, "block_sparse_attention: the k ranges of q range [",
                  qrange.first, ", ", qrange.second, ") overlap");
    out.push_back({TokenRange{qrange.first, qrange.second}, std::move(ks)});
  }
  return out;
}

}  // namespace magi2
