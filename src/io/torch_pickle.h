// A restricted reader and a minimal writer for the pickle stream inside a
// PyTorch zip checkpoint (`archive/data.pkl` of torch.save, protocol 2).
//
// The reader understands only what a saved state dict needs: plain containers
// (dict, collections.OrderedDict, list, tuple), str, int, float, bool, None,
// and tensors rebuilt by torch._utils._rebuild_tensor_v2 /
// torch._utils._rebuild_parameter over persistent 'storage' records typed by a
// torch.<X>Storage class. Any other global or opcode is an error naming it;
// nothing from the stream is ever executed (globals are matched by name only).
// Internal to src/io (torch_zip.h is the public entry point).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace magi2::torch_pickle {

/// A tensor record: where its elements live in which storage (nothing loaded).
struct TensorRef {
  std::string storage_key;    ///< name of archive/data/<key>
  std::string storage_type;   ///< e.g. "FloatStorage"
  bool dtype_known = false;   ///< storage_type maps to a DType
  DType dtype = DType::F32;
  int64_t storage_numel = 0;  ///< elements in the storage (from the record)
  int64_t offset = 0;         ///< storage_offset, in elements
  Shape shape;
  Shape stride;               ///< in elements
};

struct Value;
using ValuePtr = std::shared_ptr<const Value>;

/// One unpickled object. Dicts keep insertion order (keys are str or int).
struct Value {
  enum class Kind { None, Bool, Int, Float, Str, Tuple, List, Dict, Global, Storage, Tensor };
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                                     ///< Str text; Global "module.name"
  std::vector<ValuePtr> items;                       ///< Tuple, List
  std::vector<std::pair<ValuePtr, ValuePtr>> dict;   ///< Dict
  TensorRef tensor;                                  ///< Storage (key/type/numel), Tensor
  int depth = 1;                                     ///< nesting depth (bounded)
};

/// Parses a pickle stream. `what` names the stream in errors ("FILE: data.pkl").
/// Resources are bounded by the stream: at most bytes/2 + 64 objects, one memo
/// slot per PUT opcode (whatever index it names), each opcode linear in what
/// it adds (containers are filled in place).
/// Errors (one line starting with `what`): unknown/unsupported opcode (with
/// its byte and offset), a global outside the allow-list (named), truncated
/// stream, bad memo index, an opcode reaching below the last MARK or past the
/// stack's bottom, more objects than the budget, a container changed after it
/// was nested (recursive structures), malformed tensor/storage records,
/// nesting deeper than 64.
ValuePtr parse(std::string_view bytes, const std::string& what);

/// The torch storage class name for a dtype ("FloatStorage", ...); Error for
/// dtypes torch.save has no typed storage for here (F8E4M3).
std::string storage_type_of(DType dtype);

/// One entry for `write_state_dict`: a contiguous tensor stored in
/// archive/data/<storage_key>.
struct WriteEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::string storage_key;
};

/// Serialises {wrap_key: OrderedDict(name -> tensor)} (or the OrderedDict
/// itself when wrap_key is empty) the way torch.save does (protocol 2,
/// _rebuild_tensor_v2 over persistent storage records, location "cpu").
std::string write_state_dict(const std::vector<WriteEntry>& entries, std::string_view wrap_key);

}  // namespace magi2::torch_pickle
