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

void DitWeights::prepare_banks(Backend& be) {
  // Once per distinct bank: layers sharing one bank share its rewritten tensors too.
  std::map<const void*, const DitLayerWeights*> prepared;
  for (DitLayerWeights& L : layers) {
    if (!L.moe || !L.fp8_experts() || L.bank_layout != ExpertBankLayout::Checkpoint) continue;
    if (L.w_gate.device() != be.device()) continue;  // streamed layers keep the checkpoint layout
    const void* key = L.w_gate.data();
    if (auto it = prepared.find(key); it != prepared.end()) {
      const DitLayerWeights& P = *it->second;
      L.w_gate = P.w_gate, L.w_up = P.w_up, L.w_down = P.w_down, L.bank_layout = P.bank_layout;
      continue;
    }
    MoeExpertsParams banks{.w_gate = L.w_gate, .w_up = L.w_up, .w_down = L.w_down, .w_gate_scale = L.w_gate_scale,
                           .w_up_scale = L.w_up_scale, .w_down_scale = L.w_down_scale, .fp8_compute = fp8_compute};
    L.w_gate = Tensor(), L.w_up = Tensor(), L.w_down = Tensor();  // the old banks go when `banks` lets them go
    try {
      be.moe_prepare_banks(banks);
    } catch (const Error& e) {
      L.w_gate = banks.w_gate, L.w_up = banks.w_up, L.w_down = banks.w_down;
      throw Error(str_cat("DiT weights: rewriting layer ", L.index, "'s routed expert banks for the ", be.name(),
                          " backend (--fp8-compute w8a8 reads them K-major): ", e.what()));
    }
    L.w_gate = banks.w_gate, L.w_up = banks.w_up, L.w_down = banks.w_down, L.bank_layout = banks.bank_layout;
    prepared.emplace(key, &L);
  }
}

}  // namespace magi2
