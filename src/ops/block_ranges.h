// The key lists of a block-sparse attention call (ops.h
// BlockSparseAttentionParams): its (q range, k range) pairs grouped by q
// range, shared by the CPU op and the CUDA op's planner so that both see the
// same groups and reject the same inputs.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace magi2 {

/// A half-open token range [begin, end).
struct TokenRange {
  int32_t begin = 0, end = 0;
};

/// One q range and the k ranges of its pairs, in pair order.
using BlockSparseGroup = std::pair<TokenRange, std::vector<TokenRange>>;

/// Groups the pairs of q_ranges / k_ranges (host i32 [P, 2] of one shape) by q
/// range, q ranges ascending; empty ranges are dropped. Checks the op's
/// preconditions for `t` tokens: every range inside [0, t], two q ranges equal
/// or disjoint, the k ranges of one q range disjoint. Errors name the pair.
std::vector<BlockSparseGroup> group_block_sparse_pairs(const Tensor& q_ranges, const Tensor& k_ranges, int64_t t);

}  // namespace magi2
