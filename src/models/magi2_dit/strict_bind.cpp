#include "models/magi2_dit/strict_bind.h"

#include <map>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/mismatch_report.h"

namespace magi2 {

std::string canonical_tensor_name(const std::string& raw) {
  std::string n = raw;
  if (n.rfind("transformer.", 0) == 0) n = n.substr(12);
  if (n.rfind("layers.", 0) == 0) n = "block." + n;
  return n;
}

void bind_checkpoint_strict(const Checkpoint& ckpt, const std::string& what,
                            const std::function<void(const TensorVisit&)>& walk, size_t* num_tensors,
                            size_t* num_bytes) {
  std::map<std::string, std::string> by_canonical;  // canonical -> raw
  std::vector<std::string> duplicated;
  for (const auto& raw : ckpt.names()) {
    auto [it, inserted] = by_canonical.emplace(canonical_tensor_name(raw), raw);
    if (!inserted) duplicated.push_back(raw);
  }
  std::vector<std::string> missing, wrong;
  std::map<std::string, bool> used;
  walk([&](const std::string& name, const Shape& shape, DType dtype, Tensor* dst) {
    auto it = by_canonical.find(name);
    if (it == by_canonical.end()) {
      missing.push_back(name);
      return;
    }
    used[it->first] = true;
    const SafetensorsEntry& e = ckpt.entry(it->second);
    if (e.shape != shape) {
      wrong.push_back(str_cat(name, " (expected ", shape_str(shape), ", got ", shape_str(e.shape), ")"));
      return;
    }
    if (dtype == DType::F8E4M3 || e.dtype == DType::F8E4M3) {
      // FP8 is never converted to or from at bind time: a quantised tensor is
      // stored quantised (with its scales), everything else is not.
      if (e.dtype != dtype) {
        wrong.push_back(dtype == DType::F8E4M3
                            ? str_cat(name, " (expected F8_E4M3 like the other quantised tensors, got ",
                                      dtype_name(e.dtype), ")")
                            : str_cat(name, " (F8_E4M3 where only ", dtype_name(dtype), " can be bound)"));
        return;
      }
    }
    const bool is_float = e.dtype == DType::F32 || e.dtype == DType::BF16 || e.dtype == DType::F16 ||
                          e.dtype == DType::F8E4M3;
    if (!is_float) {
      wrong.push_back(str_cat(name, " (dtype ", dtype_name(e.dtype), " is not a float type)"));
      return;
    }
    Tensor t = ckpt.tensor(it->second);
    // Load-time cast to the parameter dtype, as the official loader's
    // tensor.to(dtype) (spec §2.2 step 1); zero-copy when it already matches.
    *dst = e.dtype == dtype ? t : t.to(dtype);
    *num_tensors += 1;
    *num_bytes += dst->nbytes();
  });
  std::vector<std::string> unexpected;
  for (const auto& [canon, raw] : by_canonical)
    if (!used.count(canon)) unexpected.push_back(raw);
  throw_if_mismatch(str_cat("checkpoint '", ckpt.path(), "' does not match the ", what, " config:"), missing, unexpected,
                    wrong, duplicated);
}

}  // namespace magi2
