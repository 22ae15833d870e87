// The FP8 linear, CPU reference (LinearParams::w_scale, `--linear-compute
// fp8`, docs/fp8.md): W8A8 with the routed experts' rule. Each row of x is
// quantised per 1 x 128 group (fp8_act.h); an output is the fp32 sum over its
// K-blocks b of (the fp32 sum of the block's e4m3 x e4m3 products, ascending
// k) * (x_scale_b * w_scale_b), rounded once to bf16. The CUDA backend (a
// blockwise-scaled CUTLASS GEMM) differs in the fp32 order inside a block only.
#include <algorithm>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "cpu/fp8_act.h"
#include "ops/numerics.h"
#include "ops/op_checks.h"

namespace magi2::cpu {

void linear_fp8(const LinearParams& p) {
  check_linear_fp8(Device::CPU, p);
  const int64_t rows = p.x.size(0), in = p.x.size(1), out = p.y.size(1);
  const int64_t kb = (in + kFp8Block - 1) / kFp8Block, nb = (out + kFp8Block - 1) / kFp8Block;
  // Every row's decoded e4m3 values and scales first (rows are independent).
  std::vector<float> xq(static_cast<size_t>(rows * in)), xs(static_cast<size_t>(rows * kb));
#pragma omp parallel
  {
    std::vector<float> xf(static_cast<size_t>(in));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(p.x, r, in, xf.data());
      quantize_groups(xf.data(), in, xq.data() + r * in, xs.data() + r * kb);
    }
  }
  const float* tab = e4m3_values().v;
  const uint8_t* wq = p.w.data_as<uint8_t>();
  const float* wsc = p.w_scale.data_as<float>();
  for (int g = 0; g < p.groups.count; ++g) {
    const int64_t r0 = p.groups.cu[g], r1 = p.groups.cu[g + 1];
    if (r0 == r1) continue;
    // Output features in parallel: each decodes its weight row once for all rows of the group.
#pragma omp parallel
    {
      std::vector<float> wrow(static_cast<size_t>(in));
#pragma omp for schedule(static)
      for (int64_t j = 0; j < out; ++j) {
        const uint8_t* w = wq + (g * out + j) * in;
        for (int64_t k = 0; k < in; ++k) wrow[k] = tab[w[k]];
        const float* ws = wsc + (g * nb + j / kFp8Block) * kb;
        for (int64_t r = r0; r < r1; ++r) {
          const float* x = xq.data() + r * in;
          const float* sx = xs.data() + r * kb;
          float acc = 0.0f;
          for (int64_t b = 0; b < kb; ++b) {
            const int64_t k1 = std::min(in, (b + 1) * kFp8Block);
            float part = 0.0f;
            for (int64_t k = b * kFp8Block; k < k1; ++k) part += x[k] * wrow[k];
            acc += part * fp8_block_scale(sx[b], ws[b]);
          }
          reinterpret_cast<uint16_t*>(row_ptr(p.y, r))[j] = f32_to_bf16_bits(acc);
        }
      }
    }
  }
}

void write_fp8_rows(const Tensor& y, const Fp8Rows& y8, const char* what) {
  MAGI2_CHECK(y.dtype() == DType::BF16 && y.dim() == 2, what, ": FP8 rows need a bf16 [R, C] output");
  const int64_t rows = y.size(0), cols = y.size(1);
  check_fp8_rows(Device::CPU, y8, rows, cols, what);
  uint8_t* q = y8.q.data_as<uint8_t>();
  float* sc = y8.scale.data_as<float>();
  const int64_t ldq = y8.q.row_stride(), lds = y8.scale.row_stride();
#pragma omp parallel
  {
    std::vector<float> v(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(y, r, cols, v.data());
      quantize_groups_bits(v.data(), cols, q + r * ldq, sc + r * lds);
    }
  }
}

}  // namespace magi2::cpu
