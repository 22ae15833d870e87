// Seeded pseudo-random fills of device tensors (magi2::cuda_fill_random):
// release-size benchmark weights made on the GPU, no host copy.
#include <algorithm>
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// u uniform in [-1, 1) from (seed, i): 24 random bits.
__device__ __forceinline__ float unit_symmetric(uint64_t seed, uint64_t i) {
  const uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1));
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// kind 0: f32, 1: bf16, 2: e4m3 codes. sqrt(3) * stddev = the uniform half-width.
__global__ void fill_random_kernel(void* out, int64_t n, uint64_t seed, float half_width, int kind) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const float u = unit_symmetric(seed, static_cast<uint64_t>(i));
    if (kind == 0)
      static_cast<float*>(out)[i] = u * half_width;
    else if (kind == 1)
      static_cast<uint16_t*>(out)[i] = dev::f32_to_bf16(u * half_width);
    else
      static_cast<uint8_t*>(out)[i] = f32_to_e4m3_bits(u * kE4m3Max);
  }
}

}  // namespace

void fill_random(const Tensor& t, uint64_t seed, float stddev, cudaStream_t s) {
  MAGI2_CHECK(t.defined() && t.device() == Device::CUDA && t.is_contiguous(),
              "cuda_fill_random: needs a contiguous CUDA tensor");
  int kind = -1;
  if (t.dtype() == DType::F32) kind = 0;
  if (t.dtype() == DType::BF16) kind = 1;
  if (t.dtype() == DType::F8E4M3) kind = 2;
  MAGI2_CHECK(kind >= 0, "cuda_fill_random: unsupported dtype ", dtype_name(t.dtype()), " (F32, BF16 or F8_E4M3)");
  const int64_t n = t.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 132 * 32);
  fill_random_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(t.data(), n, seed, 1.7320508f * stddev, kind);
  MAGI2_CUDA_CHECK_LAUNCH("cuda_fill_random");
}

}  // namespace magi2::cuda
