// LayerOffload: the layer slot layout, the pinned image of the layers and the
// copy schedule of `--offload layerwise` (layer_offload.h).
#include "ops/layer_offload.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "io/span_reader.h"

namespace magi2 {

namespace {

uint64_t aligned(uint64_t n) { return (n + kOffloadAlign - 1) / kOffloadAlign * kOffloadAlign; }

}  // namespace

Offload offload_from_name(const std::string& s, const std::string& flag) {
  if (s == "none") return Offload::None;
  if (s == "layerwise") return Offload::Layerwise;
  throw Error(str_cat(flag, " must be none or layerwise, got '", s, "'"));
}

const char* offload_name(Offload o) { return o == Offload::Layerwise ? "layerwise" : "none"; }

OffloadBytes offload_bytes_of(const std::vector<std::pair<int, uint64_t>>& tensors) {
  OffloadBytes b;
  std::map<int, uint64_t> per_layer;
  for (const auto& [layer, bytes] : tensors) {
    if (layer < 0)
      b.resident += bytes;
    else
      per_layer[layer] += aligned(bytes);
  }
  for (auto& [l, bytes] : per_layer) {
    b.slot = std::max(b.slot, bytes);
    b.layers += bytes;
  }
  return b;
}

LayerOffload::LayerOffload(const std::vector<OffloadLayer>& layers, Backend& be, std::unique_ptr<CopyQueue> queue,
                           const std::string& what, const std::function<void(size_t, size_t)>& progress)
    : q_(std::move(queue)) {
  MAGI2_CHECK(q_ != nullptr, "--offload layerwise: no copy queue for the ", be.name(),
              " backend (the CPU backend computes from host memory: use the weights as they are)");
  const size_t num_layers = layers.size();
  MAGI2_CHECK(num_layers > 0, "--offload layerwise: the ", what, " has no layers");

  // Layout. Within a layer each distinct storage gets an aligned slot offset;
  // across layers a storage is pinned once (bench's shared expert bank).
  struct Place {
    Tensor src;
    uint64_t pinned_off;
  };
  std::map<std::pair<const void*, size_t>, uint64_t> pinned_at;  // (data, bytes) -> pinned offset
  std::vector<Place> to_pin;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> spans(num_layers);  // per layer: (slot off, pinned off)
  std::vector<std::vector<uint64_t>> bytes_of(num_layers);
  std::vector<std::vector<int64_t>> slot_off_of(num_layers);  // per tensor in the given order; -1: undefined
  for (size_t l = 0; l < num_layers; ++l) {
    std::map<std::pair<const void*, size_t>, uint64_t> in_layer;
    uint64_t cur = 0;
    for (const auto& [name, t] : layers[l]) {
      if (!t.defined()) {
        slot_off_of[l].push_back(-1);
        continue;
      }
      MAGI2_CHECK(t.is_contiguous(), "--offload layerwise: ", what, " layer ", l, " tensor ", name, " ",
                  shape_str(t.shape()), " is not contiguous");
      const auto key = std::make_pair(static_cast<const void*>(t.data()), t.nbytes());
      auto it = in_layer.find(key);
      if (it != in_layer.end()) {
        slot_off_of[l].push_back(static_cast<int64_t>(it->second));
        continue;
      }
      const uint64_t off = cur;
      cur += aligned(t.nbytes());
      in_layer.emplace(key, off);
      slot_off_of[l].push_back(static_cast<int64_t>(off));
      auto p = pinned_at.find(key);
      if (p == pinned_at.end()) {
        p = pinned_at.emplace(key, pinned_bytes_).first;
        to_pin.push_back({t, pinned_bytes_});
        pinned_bytes_ += aligned(t.nbytes());
      }
      spans[l].push_back({off, p->second});
      bytes_of[l].push_back(t.nbytes());
    }
    slot_ = std::max(slot_, cur);
  }

  // Pinned image of the layers.
  pinned_ = q_->alloc_host({static_cast<int64_t>(pinned_bytes_)}, DType::U8);
  char* pinned = static_cast<char*>(pinned_.data());
  {
    SpanReader fill;  // a mmap'd tensor is read with pread: nothing but the page cache holds it afterwards
    size_t done = 0;
    for (const Place& p : to_pin) {
      if (p.src.device() == Device::CPU) {
        fill.read(p.src.data(), pinned + p.pinned_off, p.src.nbytes(), "streamed weights");
      } else {  // made on the device (bench): one synchronous device -> host copy
        be.copy({.src = p.src, .dst = Tensor::view_of(pinned + p.pinned_off, p.src.shape(), p.src.dtype(),
                                                     pinned_.owner(), Device::CPU)});
      }
      if (progress) progress(done += p.src.nbytes(), pinned_bytes_);
    }
  }

  // Two slots; layer l's tensors are views into slot l % 2 at its layout.
  for (Tensor& s : slots_) {
    try {
      s = be.alloc({static_cast<int64_t>(slot_)}, DType::U8);
    } catch (const Error& e) {
      throw Error(str_cat("--offload layerwise: cannot place a ", what, " layer slot of ", slot_, " bytes on the ",
                          be.name(), " backend: ", e.what()));
    }
  }
  views_.resize(num_layers);
  copies_.resize(num_layers);
  for (size_t l = 0; l < num_layers; ++l) {
    char* slot = static_cast<char*>(slots_[l % 2].data());
    for (size_t i = 0; i < layers[l].size(); ++i) {
      const Tensor& t = layers[l][i].second;
      views_[l].push_back(slot_off_of[l][i] < 0 ? Tensor()
                                                : Tensor::view_of(slot + slot_off_of[l][i], t.shape(), t.dtype(),
                                                                  slots_[l % 2].owner(), be.device()));
    }
    // Copies in layout order; neighbours in both the slot and the pinned image become one copy.
    for (size_t k = 0; k < spans[l].size(); ++k) {
      Copy c{slot + spans[l][k].first, pinned + spans[l][k].second, bytes_of[l][k]};
      auto& cs = copies_[l];
      if (!cs.empty()) {
        Copy& b = cs.back();
        const uint64_t gap_d = static_cast<uint64_t>(static_cast<char*>(c.dst) - static_cast<char*>(b.dst));
        const uint64_t gap_s = static_cast<uint64_t>(static_cast<const char*>(c.src) - static_cast<const char*>(b.src));
        if (c.dst > b.dst && c.src > b.src && gap_d == gap_s && gap_d == aligned(b.bytes)) {
          b.bytes = gap_d + c.bytes;
          continue;
        }
      }
      cs.push_back(c);
    }
    for (const Copy& c : copies_[l]) per_forward_ += c.bytes;
  }
}

LayerOffload::~LayerOffload() = default;

CopyQueueStats LayerOffload::stats() { return q_->stats(); }

void LayerOffload::enqueue(int l) {
  for (const Copy& c : copies_[static_cast<size_t>(l)]) q_->copy(c.dst, c.src, c.bytes);
  q_->signal(l % 2);
}

void LayerOffload::begin() {
  q_->wait_compute();
  enqueue(0);
  if (copies_.size() > 1) enqueue(1);
}

void LayerOffload::before_layer(int l) { q_->compute_wait(l % 2); }

void LayerOffload::after_layer(int l) {
  if (static_cast<size_t>(l) + 2 >= copies_.size()) return;
  q_->wait_compute();
  enqueue(l + 2);
}

}  // namespace magi2
