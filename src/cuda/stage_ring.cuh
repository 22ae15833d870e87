// A ring of shared-memory stages fed by one producer thread's TMA or bulk
// copies and read by consumer warps through mbarrier full/empty pairs: the
// fused routed-expert kernels' weight chunks, the fused router's gate. The
// mbarrier instructions are those of CUTLASS's ClusterBarrier and
// ClusterTransactionBarrier (cutlass/arch/barrier.h), written out so that
// kernels built without the CUTLASS headers (the router) share the ring.
// Device code; include only from .cu files.
#pragma once

#include <cstdint>

namespace magi2::cuda {

namespace dev {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
  asm volatile("{\n\tmbarrier.init.shared::cta.b64 [%1], %0; \n}" ::"r"(arrive_count), "r"(smem_addr(bar)));
}
/// Spins until the phase of parity `phase` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t phase) {
  const uint32_t ticks = 0x989680;  // the try-wait's time limit before it retries
  asm volatile(
      "{\n\t"
      ".reg .pred       P1; \n\t"
      "LAB_WAIT: \n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1, %2; \n\t"
      "@P1 bra DONE; \n\t"
      "bra     LAB_WAIT; \n\t"
      "DONE: \n\t"
      "}" ::"r"(smem_addr(bar)),
      "r"(phase), "r"(ticks));
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("{\n\tmbarrier.arrive.shared::cta.b64 _, [%0];\n\t}" ::"r"(smem_addr(bar)));
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("{\n\tmbarrier.arrive.expect_tx.shared::cta.b64 _, [%1], %0; \n\t}" ::"r"(bytes), "r"(smem_addr(bar)));
}

/// After one thread's mbarrier_init calls, before the block barrier that
/// publishes them: makes the initialisation visible to the async proxy.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("{\n\tfence.mbarrier_init.release.cluster; \n}" ::);
}
/// One bulk copy of `bytes` (a multiple of 16; both addresses 16-byte
/// aligned) from global to shared memory, completing on `bar`'s transaction count.
__device__ __forceinline__ void bulk_copy_g2s(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(smem)),
               "l"(gmem), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

}  // namespace dev

/// One ring of kStages shared-memory stages, chunk j in stage j % kStages:
/// `full` (the producer's copied bytes landed) and `empty` (every consumer
/// warp is done with the stage) per stage, each phase the parity of j / kStages.
template <int kStages>
struct StageRing {
  uint64_t full[kStages], empty[kStages];
  /// One thread, before the CTA's first block barrier (after a fence that
  /// publishes the initialisation to the async proxy).
  __device__ void init(int consumer_warps) {
    for (int i = 0; i < kStages; ++i) {
      dev::mbarrier_init(&full[i], 1);
      dev::mbarrier_init(&empty[i], consumer_warps);
    }
  }
  /// Producer: waits until chunk j's stage is free, arms it for `bytes` and
  /// returns the barrier its copies complete on.
  __device__ uint64_t* acquire(int j, uint32_t bytes) {
    const int s = j % kStages;
    dev::mbarrier_wait(&empty[s], ((j / kStages) & 1) ^ 1);
    dev::mbarrier_arrive_expect_tx(&full[s], bytes);
    return &full[s];
  }
  /// Consumer: waits for chunk j's bytes.
  __device__ void wait(int j) { dev::mbarrier_wait(&full[j % kStages], (j / kStages) & 1); }
  /// Consumer warp (`signal` on one lane): done with chunk j's stage.
  __device__ void release(int j, bool signal) {
    if (signal) dev::mbarrier_arrive(&empty[j % kStages]);
  }
};

}  // namespace magi2::cuda
