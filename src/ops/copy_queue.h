// A second queue of host -> device copies that run beside a backend's compute
// (weight streaming, `--offload layerwise`, docs/memory.md). Ordering between
// the two queues is by numbered fences, so a copy can start as soon as the
// compute that last read its destination is done, and compute waits only for
// the copy it needs. Every call only enqueues (CUDA: a stream and events), so a
// step that streams weights still captures into one graph.
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace magi2 {

/// What the copies of eager (not captured) runs moved so far.
struct CopyQueueStats {
  size_t bytes = 0;      ///< bytes copied by timed copies
  double ms = 0;         ///< summed device time of those copies (each from its start to its end)
  size_t copies = 0;     ///< number of timed copies
  /// Achieved host -> device rate of the timed copies in GB/s (1e9 bytes/s); 0 without any.
  double gb_per_s() const { return ms > 0 ? static_cast<double>(bytes) / (ms * 1e6) : 0; }
};

/// Made by Backend::make_copy_queue; lives no longer than its backend.
class CopyQueue {
 public:
  virtual ~CopyQueue() = default;

  /// A host tensor the device can read asynchronously (CUDA: cudaHostAlloc'd,
  /// page-locked): the only valid source of copy(). Allocate at load time,
  /// never inside a captured step. Error when the host cannot pin that much.
  virtual Tensor alloc_host(const Shape& shape, DType dtype) = 0;

  /// Copies enqueued from now on start only after every op enqueued on the
  /// compute stream so far (the first call of a captured step forks the
  /// queue into the capture).
  virtual void wait_compute() = 0;
  /// Enqueues `bytes` from `src` (inside an alloc_host tensor) to `dst`
  /// (device memory of the backend); returns at once. Timed (stats()) when
  /// the compute stream is not being captured.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  /// Fence `f` (0 <= f < the queue's fence count) now stands for every copy
  /// enqueued so far.
  virtual void signal(int f) = 0;
  /// Ops enqueued on the compute stream from now on wait for fence `f`'s last
  /// signal. Every signal of a captured step must be waited for within it.
  virtual void compute_wait(int f) = 0;

  /// Bytes and device time of the timed copies since the queue was made;
  /// waits for the pending ones (call outside a step).
  virtual CopyQueueStats stats() = 0;
};

}  // namespace magi2
