#include "ops/op_checks.h"

#include "core/error.h"

namespace magi2 {

void check_2d_on(Device device, const Tensor& t, int64_t rows, int64_t cols, const char* what) {
  MAGI2_CHECK(t.defined(), what, ": tensor is missing");
  MAGI2_CHECK(t.device() == device, what, ": expected a ", device == Device::CUDA ? "CUDA" : "CPU", " tensor");
  MAGI2_CHECK(t.dim() == 2 && t.shape()[0] == rows && t.shape()[1] == cols && t.strides()[1] == 1, what,
              ": expected [", rows, ", ", cols, "] with unit column stride, got ", shape_str(t.shape()));
}

const int32_t* check_index_on(Device device, const Tensor& t, int64_t n, const char* what) {
  MAGI2_CHECK(t.defined(), what, ": index tensor is missing");
  MAGI2_CHECK(t.device() == device, what, ": expected a ", device == Device::CUDA ? "CUDA" : "CPU", " tensor");
  MAGI2_CHECK(t.dtype() == DType::I32 && t.is_contiguous() && t.numel() == n, what, ": expected ", n,
              " contiguous i32 values, got ", shape_str(t.shape()), " ", dtype_name(t.dtype()));
  return t.data_as<int32_t>();
}

void check_row_groups(const Groups& g, int64_t rows, const char* what) {
  MAGI2_CHECK(g.count >= 1 && g.count <= 3 && g.cu[0] == 0 && g.cu[g.count] == rows, what,
              ": row groups do not cover ", rows, " rows");
  for (int m = 0; m < g.count; ++m) MAGI2_CHECK(g.cu[m] <= g.cu[m + 1], what, ": row groups not ordered");
}

}  // namespace magi2
