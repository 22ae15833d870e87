// DitOffload: the DiT's layers handed to LayerOffload, the rest uploaded once
// (offload.h).
#include "models/magi2_dit/offload.h"

#include "core/error.h"

namespace magi2 {

namespace {

// The layer index of an official name "block.layers.<l>.*", or -1.
int layer_of(const std::string& name) {
  static const std::string pre = "block.layers.";
  if (!name.starts_with(pre)) return -1;
  const size_t dot = name.find('.', pre.size());
  if (dot == std::string::npos || dot == pre.size()) return -1;
  return std::stoi(name.substr(pre.size(), dot - pre.size()));
}

}  // namespace

OffloadBytes offload_bytes(const std::vector<DitTensorSpec>& specs) {
  std::vector<std::pair<int, uint64_t>> sizes;
  for (const DitTensorSpec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    sizes.emplace_back(layer_of(s.name), static_cast<uint64_t>(n) * dtype_size(s.dtype));
  }
  return offload_bytes_of(sizes);
}

DitOffload::DitOffload(const DitWeights& host, Backend& be, std::unique_ptr<CopyQueue> queue,
                       const std::function<void(size_t, size_t)>& progress) {
  std::vector<OffloadLayer> layers(host.layers.size());
  for (size_t l = 0; l < host.layers.size(); ++l) {
    DitLayerWeights L = host.layers[l];
    for_each_layer_tensor(L, [&](const char* what, Tensor& t) { layers[l].emplace_back(what, t); });
  }
  layers_ = std::make_unique<LayerOffload>(layers, be, std::move(queue), "DiT", progress);

  // Resident part: everything but the layers, uploaded once.
  DitWeights resident = host;
  resident.layers.clear();
  dev_ = resident.to_backend(be);
  dev_.layers = host.layers;
  // Layer l's tensors are views into slot l % 2 (LayerOffload::layer keeps the visit order).
  for (size_t l = 0; l < dev_.layers.size(); ++l) {
    const std::vector<Tensor>& views = layers_->layer(l);
    size_t i = 0;
    for_each_layer_tensor(dev_.layers[l], [&](const char*, Tensor& t) { t = views.at(i++); });
  }
}

DitOffload::~DitOffload() = default;

}  // namespace magi2
