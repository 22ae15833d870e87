// RMSNorm (spec magi2-dit.md §4.1): fp32 math, gain (1 + w) per row group.
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/op_checks.h"

namespace magi2::cpu {

void rms_norm(const RmsNormParams& p) {
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  MAGI2_CHECK(p.heads >= 1 && cols % p.heads == 0, "rms_norm: ", cols, " columns do not split into ", p.heads,
              " heads");
  const int64_t d = cols / p.heads;
  check_2d(p.x, rows, cols, "rms_norm.x");
  check_2d(p.y, rows, cols, "rms_norm.y");
  check_groups(p.groups, rows, "rms_norm");
  for (const Tensor* t : {&p.x, &p.y})
    MAGI2_CHECK(t->dtype() == DType::BF16 || t->dtype() == DType::F32, t == &p.x ? "rms_norm.x" : "rms_norm.y",
                ": expected bf16 or f32");
  MAGI2_CHECK(p.w.dtype() == DType::F32 && p.w.numel() == d * p.groups.count, "rms_norm.w: expected ",
              d * p.groups.count, " f32 values, got ", shape_str(p.w.shape()));
  if (p.y8.defined()) {
    MAGI2_CHECK(p.y.dtype() == DType::BF16 && p.heads == 1, "rms_norm.y8: needs a bf16 y and one head a row");
    check_fp8_rows(Device::CPU, p.y8, rows, cols, "rms_norm.y8");
  }
  const float* w = p.w.data_as<float>();
#pragma omp parallel
  {
    std::vector<float> x(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(p.x, r, cols, x.data());
      const float* wm = w + static_cast<int64_t>(group_of(p.groups, r)) * d;
      for (int64_t h = 0; h < p.heads; ++h) rms_normalize(x.data() + h * d, d, wm, p.eps);
      store_row(p.y, r, cols, x.data());
    }
  }
  if (p.y8.defined()) write_fp8_rows(p.y, p.y8, "rms_norm.y8");
}

}  // namespace magi2::cpu
