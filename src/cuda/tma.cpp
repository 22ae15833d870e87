// TMA descriptors (tma.h): cuTensorMapEncodeTiled through the runtime's
// driver entry point, so the library links only cudart.
#include "cuda/tma.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/cuda_common.h"

namespace magi2::cuda {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    MAGI2_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    MAGI2_CHECK(q == cudaDriverEntryPointSuccess && p != nullptr, "TMA: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap tma_map_2d(const void* base, TmaElem elem, int64_t rows, int64_t cols, int64_t ld, int box_cols,
                       int box_rows, CUtensorMapSwizzle swizzle, const char* what) {
  const bool bf16 = elem == TmaElem::kBf16;
  CUtensorMap m{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * (bf16 ? 2 : 1)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult res = encode_fn()(&m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides,
                                   box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MAGI2_CHECK(res == CUDA_SUCCESS, "TMA: the driver refused the descriptor of ", what, " (error ",
              static_cast<int>(res), ")");
  return m;
}

}  // namespace magi2::cuda
