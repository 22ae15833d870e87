// Row gathers and column-slice copies of the CUDA backend (the token
// permutations of spec magi2-dit.md §3.9 and the qkv assembly of §6). Pure
// data movement: the bytes equal the CPU backend's by construction.
#include <cstdint>

#include "cuda/attn_ops.h"
#include "cuda/cuda_common.h"

namespace magi2::cuda {

namespace {

constexpr int kThreads = 256;

// One block per destination row; the row moves in 4-byte words when every row
// start is 4-byte aligned (bf16 rows of even width, f32 rows), else in bytes.
template <typename W>
__global__ void gather_rows_kernel(const W* __restrict__ src, int64_t lds, W* __restrict__ dst, int64_t ldd,
                                   const int32_t* __restrict__ index, int64_t src_rows, int64_t words) {
  const int64_t r = blockIdx.x;
  const int64_t sr = index[r];
  W* d = dst + r * ldd;
  if (sr < 0 || sr >= src_rows) {  // no host check on the device path: a bad index gives a zero row
    for (int64_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = W(0);
    return;
  }
  const W* s = src + sr * lds;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
}

}  // namespace

void gather_rows(const GatherRowsParams& p, cudaStream_t s) {
  MAGI2_CHECK(p.dst.defined() && p.dst.dim() == 2, "gather_rows.dst: expected a 2-D tensor");
  const int64_t rows = p.dst.size(0), cols = p.dst.size(1);
  const int32_t* d_index = check_index_on(Device::CUDA, p.index, rows, "gather_rows.index");
  MAGI2_CHECK(p.src.defined() && p.src.dim() == 2, "gather_rows.src: expected a 2-D tensor");
  check_2d(p.src, p.src.size(0), cols, "gather_rows.src");
  check_2d(p.dst, rows, cols, "gather_rows.dst");
  MAGI2_CHECK(p.src.dtype() == p.dst.dtype(), "gather_rows: dtype mismatch");
  const int64_t src_rows = p.src.size(0);
  if (rows == 0 || cols == 0) return;
  const int64_t es = static_cast<int64_t>(dtype_size(p.src.dtype()));
  const int64_t bytes = cols * es, lds = p.src.row_stride() * es, ldd = p.dst.row_stride() * es;
  const bool words = (bytes % 4 == 0) && (lds % 4 == 0) && (ldd % 4 == 0) &&
                     (reinterpret_cast<uintptr_t>(p.src.data()) % 4 == 0) &&
                     (reinterpret_cast<uintptr_t>(p.dst.data()) % 4 == 0);
  if (words)
    gather_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        static_cast<const uint32_t*>(p.src.data()), lds / 4, static_cast<uint32_t*>(p.dst.data()), ldd / 4, d_index,
        src_rows, bytes / 4);
  else
    gather_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        static_cast<const uint8_t*>(p.src.data()), lds, static_cast<uint8_t*>(p.dst.data()), ldd, d_index, src_rows, bytes);
  MAGI2_CUDA_CHECK_LAUNCH("gather_rows");
}

void copy_cols(const CopyColsParams& p, cudaStream_t s) {
  MAGI2_CHECK(p.src.defined() && p.src.dim() == 2, "copy_cols.src: expected a 2-D tensor");
  const int64_t rows = p.src.size(0), cols = p.src.size(1);
  check_2d(p.src, rows, cols, "copy_cols.src");
  MAGI2_CHECK(p.dst.defined() && p.dst.dim() == 2 && p.dst.size(0) == rows && p.col_begin >= 0 &&
                  p.col_begin + cols <= p.dst.size(1),
              "copy_cols: destination ", shape_str(p.dst.shape()), " cannot take columns [", p.col_begin, ", ",
              p.col_begin + cols, ")");
  check_2d(p.dst, rows, p.dst.size(1), "copy_cols.dst");
  MAGI2_CHECK(p.src.dtype() == DType::F32 && p.dst.dtype() == DType::F32, "copy_cols: expected f32");
  if (rows == 0 || cols == 0) return;
  MAGI2_CUDA_CHECK(cudaMemcpy2DAsync(p.dst.data_as<float>() + p.col_begin, static_cast<size_t>(p.dst.row_stride()) * 4,
                                     p.src.data(), static_cast<size_t>(p.src.row_stride()) * 4,
                                     static_cast<size_t>(cols) * 4, static_cast<size_t>(rows),
                                     cudaMemcpyDeviceToDevice, s));
}

}  // namespace magi2::cuda
