// cp.async (16-byte global -> shared copies that bypass L1) for the kernels
// that stream through per-thread rings (the fused mHC kernels) or gather rows
// (the fused routed experts). Include only
// from .cu files.
#pragma once

namespace magi2::cuda::dev {

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
/// The same copy with an L2 prefetch hint: the L2 fetches the whole aligned
/// kPrefetch-byte piece (64, 128 or 256) around gmem, so a pattern that reads a
/// row's 64-byte pieces over successive steps finds the next pieces in L2.
template <int kPrefetch>
__device__ __forceinline__ void cp_async16_prefetch(void* smem, const void* gmem) {
  static_assert(kPrefetch == 0 || kPrefetch == 64 || kPrefetch == 128 || kPrefetch == 256, "L2 prefetch size");
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (kPrefetch == 0)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
  else if constexpr (kPrefetch == 64)
    asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
  else if constexpr (kPrefetch == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
/// The same copy reading only `src_bytes` (0 or 16) of gmem and zero-filling the rest.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/// Waits until at most kPending of this thread's commit groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace magi2::cuda::dev
