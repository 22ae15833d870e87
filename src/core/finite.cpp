#include "core/finite.h"

#include <cstring>
#include <vector>

namespace magi2 {
namespace {

// Exponent-all-ones masks (NaN or Inf) and NaN tests on the raw bits.
bool bad_f32(uint32_t b) { return (b & 0x7f800000u) == 0x7f800000u; }
bool nan_f32(uint32_t b) { return bad_f32(b) && (b & 0x007fffffu) != 0; }
bool bad_bf16(uint16_t b) { return (b & 0x7f80u) == 0x7f80u; }
bool nan_bf16(uint16_t b) { return bad_bf16(b) && (b & 0x007fu) != 0; }
bool bad_f16(uint16_t b) { return (b & 0x7c00u) == 0x7c00u; }
bool nan_f16(uint16_t b) { return bad_f16(b) && (b & 0x03ffu) != 0; }
bool nan_f8e4m3(uint8_t b) { return (b & 0x7fu) == 0x7fu; }

template <typename Bits, typename Bad, typename Nan>
void scan(const Tensor& t, Bad bad, Nan nan, NonFiniteCount& out) {
  const auto* base = static_cast<const Bits*>(t.data());
  auto visit = [&](int64_t flat, Bits v) {
    if (!bad(v)) return;
    if (out.count++ == 0) out.first = flat;
    out.nan += nan(v) ? 1 : 0;
  };
  const int64_t n = t.numel();
  if (t.is_contiguous()) {
    for (int64_t i = 0; i < n; ++i) visit(i, base[i]);
    return;
  }
  const size_t nd = t.shape().size();
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < nd; ++d) off += idx[d] * t.strides()[d];
    visit(i, base[off]);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

NonFiniteCount count_nonfinite(const Tensor& t) {
  NonFiniteCount out;
  if (!t.defined() || t.numel() == 0) return out;
  MAGI2_CHECK(t.device() == Device::CPU, "count_nonfinite: tensor ", shape_str(t.shape()),
              " is on the GPU (copy it to the host first)");
  switch (t.dtype()) {
    case DType::F32: scan<uint32_t>(t, bad_f32, nan_f32, out); break;
    case DType::BF16: scan<uint16_t>(t, bad_bf16, nan_bf16, out); break;
    case DType::F16: scan<uint16_t>(t, bad_f16, nan_f16, out); break;
    case DType::F8E4M3: scan<uint8_t>(t, nan_f8e4m3, nan_f8e4m3, out); break;
    default: break;  // integers and bools are always finite
  }
  return out;
}

void check_finite(const Tensor& t, const std::string& what) {
  const NonFiniteCount c = count_nonfinite(t);
  MAGI2_CHECK(c.count == 0, what, ": ", c.count, " of ", t.numel(), " values are not finite (", c.nan,
              " NaN; first at index ", c.first, ")");
}

}  // namespace magi2
