// Device half of test_cuda_fused's SigmoidFastIsTheFdividefFormBitForBit: every
// one of the 2^32 fp32 bit patterns through cuda::dev::sigmoid_fast_f32 (the .ftz SFU
// form) and through the __fdividef(1, 1 + __expf(-z)) form it replaced.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_fp.cuh"
#include "mismatch_count.cuh"

namespace magi2::test {

namespace {

__global__ void sigmoid_fast_mismatch_kernel(unsigned long long* __restrict__ count) {
  unsigned long long local = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += stride) {
    const float z = __uint_as_float(static_cast<uint32_t>(i));
    const float a = cuda::dev::sigmoid_fast_f32(z), b = __fdividef(1.0f, 1.0f + __expf(-z));
    const bool same = __float_as_uint(a) == __float_as_uint(b) || (a != a && b != b);  // NaN: any NaN
    local += same ? 0 : 1;
  }
  if (local != 0) atomicAdd(count, local);  // a count: its order does not matter
}

}  // namespace

/// Number of fp32 inputs on which the two sigmoid forms differ in bits (NaN
/// results count as equal whatever their payload). Synchronises `s`.
uint64_t sigmoid_fast_mismatches(cudaStream_t s) {
  unsigned long long* d = mismatch_counter(s);
  if (d != nullptr) sigmoid_fast_mismatch_kernel<<<1024, 256, 0, s>>>(d);
  return read_mismatches(d, s);
}

}  // namespace magi2::test
