// `--offload layerwise` (docs/memory.md) for any model made of a stack of
// layers (the DiT, the Qwen3.5 text encoder): the layers' weights stay in
// pinned host memory and stream into two device slots, layer l into slot l % 2
// on the backend's copy queue while layer l - 1 computes. The model keeps its
// other tensors resident and computes from views into the slots, so its
// outputs are the resident run's bytes. Every call only enqueues copies and
// fences, so a streamed forward still captures into one graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops/copy_queue.h"
#include "ops/ops.h"

namespace magi2 {

/// Where a model's layer weights live during a run [--offload, EngineOptions::offload].
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

/// Weight bytes of a layerwise run (memory plan).
struct OffloadBytes {
  uint64_t resident = 0;  ///< non-layer tensors, resident on the device (raw bytes)
  uint64_t slot = 0;      ///< one device slot: the largest layer, each tensor rounded up to kOffloadAlign
  uint64_t layers = 0;    ///< every layer's slot image, the pinned host memory (same rounding)
  uint64_t device() const { return resident + 2 * slot; }
};

/// OffloadBytes of a model's tensors given as (layer, bytes), layer -1 for a
/// tensor that stays resident: the layout LayerOffload gives tensors of those
/// sizes (each distinct storage once per layer).
OffloadBytes offload_bytes_of(const std::vector<std::pair<int, uint64_t>>& tensors);

/// One layer's host tensors for LayerOffload, named for errors. Undefined
/// tensors (absent parts of the layer) are kept in place and skipped.
using OffloadLayer = std::vector<std::pair<std::string, Tensor>>;

/// Streams a model's layers (see the file comment). Made once at load time.
/// The model calls begin() at the start of a forward, then before_layer(l) /
/// after_layer(l) around each layer l in order. Lives no longer than the
/// backend; the model must not outlive it.
class LayerOffload {
 public:
  /// Copies every defined tensor of `layers` into one pinned host allocation
  /// of `queue` (a mmap'd checkpoint tensor is read with pread from its
  /// shard; views of one storage, e.g. bench's shared expert bank, are pinned
  /// once) and allocates the two slots on `be`. `queue` is `be`'s
  /// (cuda_copy_queue(be, 2), cuda/copy_queue.h; the CPU backend has none: it
  /// computes from host memory). `what` names the model in errors ("DiT",
  /// "text encoder"). `progress` (optional): bytes pinned so far and in all.
  /// Errors: Error for a null queue, no layers, a non-contiguous tensor, or
  /// pinned or device memory running out (naming it).
  LayerOffload(const std::vector<OffloadLayer>& layers, Backend& be, std::unique_ptr<CopyQueue> queue,
               const std::string& what, const std::function<void(size_t, size_t)>& progress = {});
  ~LayerOffload();
  LayerOffload(const LayerOffload&) = delete;
  LayerOffload& operator=(const LayerOffload&) = delete;

  size_t num_layers() const { return views_.size(); }
  /// Layer l's tensors on the device, in the order given: views into slot
  /// l % 2 (undefined where the input was), valid while layer l is in its slot.
  const std::vector<Tensor>& layer(size_t l) const { return views_.at(l); }
  /// Host -> device bytes of one forward (every layer once, with the
  /// alignment padding between merged tensors).
  uint64_t bytes_per_forward() const { return per_forward_; }
  /// Device bytes of one slot and pinned host bytes (the layout of offload_bytes_of).
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
  Tensor pinned_, slots_[2];
  std::vector<std::vector<Tensor>> views_;
  std::vector<std::vector<Copy>> copies_;  // per layer, adjacent ranges merged
  uint64_t per_forward_ = 0, slot_ = 0, pinned_bytes_ = 0;
};

}  // namespace magi2
