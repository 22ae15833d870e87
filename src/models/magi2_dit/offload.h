// `--offload layerwise` (docs/memory.md): the DiT's per-layer weights stay in
// pinned host memory and stream into two device slots, layer l into slot
// l % 2 on the backend's copy queue while layer l - 1 computes; embeddings,
// RoPE bands and the final head stay resident. Every step is still one
// capturable stream of ops (copies and fences only enqueue), and the bytes
// the layers compute from are the resident run's, so outputs are identical.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/magi2_dit/weights.h"
#include "ops/copy_queue.h"

namespace magi2 {

/// Where the DiT's weights live during a run [--offload, EngineOptions::offload].
enum class Offload {
  None,       ///< every weight resident on the compute device
  Layerwise,  ///< layer weights streamed from pinned host memory (CUDA; a no-op on the CPU backend)
};

/// Parses the `--offload` value: "none" or "layerwise". Error naming `flag` and the value otherwise.
Offload offload_from_name(const std::string& s, const std::string& flag);
/// The `--offload` spelling.
const char* offload_name(Offload o);

/// Byte alignment of each tensor inside a layer slot (and its pinned image):
/// cuBLASLt and the vector loads see the alignment of a fresh allocation.
constexpr uint64_t kOffloadAlign = 256;

/// Weight bytes of a layerwise run, from the tensor list alone (memory plan).
struct OffloadBytes {
  uint64_t resident = 0;  ///< non-layer tensors, resident on the device (raw bytes)
  uint64_t slot = 0;      ///< one device slot: the largest layer, each tensor rounded up to kOffloadAlign
  uint64_t layers = 0;    ///< every layer's slot image, the pinned host memory (same rounding)
  uint64_t device() const { return resident + 2 * slot; }
};

/// OffloadBytes of `specs` (dit_tensor_specs: layer tensors are named
/// "block.layers.<l>.*"); what DitOffload allocates for weights bound to them.
OffloadBytes offload_bytes(const std::vector<DitTensorSpec>& specs);

/// Streams one DiT's layers (see the file comment). Made once at load time;
/// `weights()` is what the Dit computes from (resident tensors on the device,
/// layer l's tensors views into slot l % 2). Dit::forward calls begin(), then
/// before_layer(l) / after_layer(l) around each layer. Lives no longer than
/// the backend; the Dit must not outlive it.
class DitOffload {
 public:
  /// Copies the layer tensors of `host` into one pinned host allocation of
  /// `queue` (a mmap'd checkpoint tensor is read with pread from its shard;
  /// views of one storage, e.g. bench's shared expert bank, are pinned once),
  /// uploads the rest to `be` (DitWeights::to_backend) and allocates the two
  /// slots there. `queue` is `be`'s (cuda_copy_queue(be, 2), cuda/copy_queue.h;
  /// the CPU backend has none: it computes from host memory). `host` may be
  /// dropped afterwards. Errors: Error for a null queue, a non-contiguous
  /// tensor, or pinned or device memory running out (naming it).
  /// `progress` (optional): bytes pinned so far and in all.
  DitOffload(const DitWeights& host, Backend& be, std::unique_ptr<CopyQueue> queue,
             const std::function<void(size_t, size_t)>& progress = {});
  ~DitOffload();
  DitOffload(const DitOffload&) = delete;
  DitOffload& operator=(const DitOffload&) = delete;

  const DitWeights& weights() const { return dev_; }
  /// Host -> device bytes of one forward (every layer once, with the
  /// alignment padding between merged tensors).
  uint64_t bytes_per_forward() const { return per_forward_; }
  /// Device bytes of one slot and pinned host bytes (the layout of offload_bytes).
  uint64_t slot_bytes() const { return slot_; }
  uint64_t pinned_bytes() const { return pinned_bytes_; }
  /// The copy queue's timed copies (eager forwards; waits for them).
  CopyQueueStats stats();

  /// Start of a forward: the queue waits for the compute so far, then layers 0
  /// and 1 are copied into slots 0 and 1.
  void begin();
  /// Compute waits until layer l is in its slot.
  void before_layer(int l);
  /// Layer l's ops are enqueued: once they are done, layer l + 2 is copied
  /// into the slot they read.
  void after_layer(int l);

 private:
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  void enqueue(int l);

  std::unique_ptr<CopyQueue> q_;
  DitWeights dev_;
  Tensor pinned_, slots_[2];
  std::vector<std::vector<Copy>> copies_;  // per layer, adjacent ranges merged
  uint64_t per_forward_ = 0, slot_ = 0, pinned_bytes_ = 0;
};

}  // namespace magi2
