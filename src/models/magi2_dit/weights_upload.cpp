// DitWeights::to_backend: the one upload of the DiT's weights to a device.
#include <map>

#include "core/error.h"
#include "models/magi2_dit/weights.h"

namespace magi2 {

DitWeights DitWeights::to_backend(Backend& be, const std::function<void(size_t, size_t)>& progress) const {
  DitWeights out = *this;
  std::vector<CopyParams> copies;
  // Views of one host storage at one address upload once (layers sharing an
  // expert bank in `magi2 bench`, tied tensors): keyed by (data, bytes).
  std::map<std::pair<const void*, size_t>, Tensor> done;
  out.for_each_tensor([&](const char* what, Tensor& t) {
    if (!t.defined() || (t.device() == be.device() && t.is_contiguous())) return;
    MAGI2_CHECK(t.is_contiguous(), "DiT weights: ", what, " tensor ", shape_str(t.shape()), " is not contiguous");
    const auto key = std::make_pair(static_cast<const void*>(t.data()), t.nbytes());
    auto it = done.find(key);
    if (it != done.end() && it->second.shape() == t.shape() && it->second.dtype() == t.dtype()) {
      t = it->second;
      return;
    }
    Tensor d;
    try {
      d = be.alloc(t.shape(), t.dtype());
    } catch (const Error& e) {
      throw Error(str_cat("DiT weights: cannot place ", what, " tensor ", shape_str(t.shape()), " ",
                          dtype_name(t.dtype()), " on the ", be.name(), " backend: ", e.what()));
    }
    copies.push_back({.src = t, .dst = d});
    done.emplace(key, d);
    t = d;
  });
  be.copy_many(copies, progress);
  return out;
}

}  // namespace magi2
