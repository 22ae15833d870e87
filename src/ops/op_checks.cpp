#include "ops/op_checks.h"

#include <string>

#include "core/error.h"
#include "ops/numerics.h"

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

void check_mhc_next(Device device, const MhcPostResParams& p, int64_t rows, int64_t vw) {
  const MhcLogitsParams& n = p.next;
  if (!n.logits.defined()) return;
  constexpr int64_t kLogits = 24;  // H_pre (4) + H_post (4) + H_res (16), spec §9
  check_2d_on(device, n.logits, rows, kLogits, "mhc_post_res.next.logits");
  MAGI2_CHECK(n.logits.dtype() == DType::F32, "mhc_post_res.next.logits: expected f32");
  check_row_groups(n.groups, rows, "mhc_post_res.next");
  const int64_t nw = vw * n.groups.count;
  MAGI2_CHECK(n.norm_w.defined() && n.norm_w.device() == device && n.norm_w.dtype() == DType::F32 &&
                  n.norm_w.numel() == nw && n.norm_w.is_contiguous(),
              "mhc_post_res.next.norm_w: expected ", nw, " contiguous f32 values");
  MAGI2_CHECK(n.phi.defined() && n.phi.device() == device && n.phi.dtype() == DType::F32 &&
                  n.phi.shape() == Shape({vw, kLogits}) && n.phi.is_contiguous(),
              "mhc_post_res.next.phi: expected contiguous [", vw, ", 24] f32, got ",
              n.phi.defined() ? shape_str(n.phi.shape()) : std::string("nothing"));
}

void check_linear_fp8(Device device, const LinearParams& p) {
  MAGI2_CHECK(p.x.defined() && p.y.defined() && p.x.dim() == 2 && p.y.dim() == 2,
              "linear (FP8): x and y must be 2-D tensors");
  const int64_t rows = p.x.size(0), in = p.x.size(1), out = p.y.size(1);
  check_2d_on(device, p.x, rows, in, "linear.x");
  check_2d_on(device, p.y, rows, out, "linear.y");
  check_row_groups(p.groups, rows, "linear");
  MAGI2_CHECK(p.x.dtype() == DType::BF16 && p.y.dtype() == DType::BF16,
              "linear (FP8 weights): x and y must be bf16, got ", dtype_name(p.x.dtype()), " and ",
              dtype_name(p.y.dtype()));
  MAGI2_CHECK(!p.bias.defined(), "linear (FP8 weights): a bias is not supported");
  const int64_t g = p.groups.count;
  MAGI2_CHECK(p.w.device() == device && p.w.dtype() == DType::F8E4M3 && p.w.is_contiguous() && p.w.dim() == 2 &&
                  p.w.size(0) == out * g && p.w.size(1) == in,
              "linear.w (FP8): expected F8_E4M3 [", out * g, ", ", in, "], got ", dtype_name(p.w.dtype()), " ",
              shape_str(p.w.shape()));
  const Shape ws{g, (out + kFp8Block - 1) / kFp8Block, (in + kFp8Block - 1) / kFp8Block};
  MAGI2_CHECK(p.w_scale.defined() && p.w_scale.device() == device && p.w_scale.dtype() == DType::F32 &&
                  p.w_scale.is_contiguous() && p.w_scale.shape() == ws,
              "linear.w_scale: expected F32 ", shape_str(ws), " (one scale per 128 x 128 block), got ",
              p.w_scale.defined() ? shape_str(p.w_scale.shape()) : std::string("nothing"));
  if (p.x8.defined()) check_fp8_rows(device, p.x8, rows, in, "linear.x8");
}

namespace {
std::string described(const Tensor& t) {
  return t.defined() ? std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) : std::string("nothing");
}
}  // namespace

void check_fp8_rows(Device device, const Fp8Rows& a, int64_t rows, int64_t cols, const char* what) {
  MAGI2_CHECK(cols % kFp8ActGroup == 0, what, ": FP8 rows need a multiple of ", kFp8ActGroup, " columns, got ", cols);
  const Shape qs{rows, cols}, ss{rows, cols / kFp8ActGroup};
  const auto rows_of = [&](const Tensor& t, DType dt, const Shape& sh) {
    return t.defined() && t.device() == device && t.dtype() == dt && t.dim() == 2 && t.shape() == sh &&
           t.strides()[1] == 1;
  };
  MAGI2_CHECK(rows_of(a.q, DType::F8E4M3, qs), what, ".q: expected F8_E4M3 ", shape_str(qs),
              " with unit column stride, got ", described(a.q));
  MAGI2_CHECK(rows_of(a.scale, DType::F32, ss), what, ".scale: expected F32 ", shape_str(ss),
              " with unit column stride, got ", described(a.scale));
}

}  // namespace magi2
