// Strict binding of a checkpoint to a model's tensor list (official names):
// every expected tensor present with its shape, no tensor left over, no name
// twice. Shared by the preview DiT (weights.cpp) and the refiner
// (models/magi2_refiner/weights.cpp).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "core/tensor.h"
#include "io/checkpoint.h"

namespace magi2 {

/// Called once per expected tensor with its official name, shape, the dtype
/// the model computes with, and where to put it.
using TensorVisit = std::function<void(const std::string& name, const Shape& shape, DType dtype, Tensor* dst)>;

/// Official name of a stored tensor: a leading "transformer." dropped and
/// "layers." mapped to "block.layers." (both spellings occur, spec §2.1).
std::string canonical_tensor_name(const std::string& raw);

/// Binds `ckpt` to the tensors `walk` visits (it calls its argument once per
/// expected tensor). Float tensors are cast to the expected dtype at load
/// (zero-copy when they match); F8_E4M3 binds only where F8_E4M3 is expected
/// (FP8 routed experts, docs/fp8.md), never by conversion. Adds to *num_tensors / *num_bytes. Errors: one
/// Error "checkpoint 'PATH' does not match the `what` config: N missing [...];
/// N unexpected [...]; N with the wrong shape/dtype [...]; N duplicated [...]".
void bind_checkpoint_strict(const Checkpoint& ckpt, const std::string& what,
                            const std::function<void(const TensorVisit&)>& walk, size_t* num_tensors,
                            size_t* num_bytes);

}  // namespace magi2
