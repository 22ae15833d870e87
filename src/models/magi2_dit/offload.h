// `--offload layerwise` for the DiT (docs/memory.md; the streaming itself is
// the shared LayerOffload, ops/layer_offload.h): the per-layer weights
// ("block.layers.<l>.*") stream through two device slots; embeddings, RoPE
// bands and the final head stay resident.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/magi2_dit/weights.h"
#include "ops/layer_offload.h"

namespace magi2 {

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
  /// Host -> device bytes of one forward (LayerOffload::bytes_per_forward).
  uint64_t bytes_per_forward() const { return layers_->bytes_per_forward(); }
  /// Device bytes of one slot and pinned host bytes (the layout of offload_bytes).
  uint64_t slot_bytes() const { return layers_->slot_bytes(); }
  uint64_t pinned_bytes() const { return layers_->pinned_bytes(); }
  /// The copy queue's timed copies (eager forwards; waits for them).
  CopyQueueStats stats() { return layers_->stats(); }

  /// The schedule of LayerOffload: begin() at the start of a forward, then
  /// before_layer(l) / after_layer(l) around each layer.
  void begin() { layers_->begin(); }
  void before_layer(int l) { layers_->before_layer(l); }
  void after_layer(int l) { layers_->after_layer(l); }

 private:
  std::unique_ptr<LayerOffload> layers_;
  DitWeights dev_;
};

}  // namespace magi2
