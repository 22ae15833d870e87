// PyTorch zip checkpoints (the torch.save format since torch 1.6): a zip
// archive whose entries all sit under one folder `<archive>/`:
//   <archive>/data.pkl        pickle of the saved object (tensors as persistent
//                             'storage' records, torch._utils._rebuild_tensor_v2)
//   <archive>/data/<key>      raw little-endian bytes of storage <key>
//   <archive>/byteorder       "little" (absent in old files: little assumed)
//   <archive>/version         serialisation version
// Reading uses libzip and a restricted unpickler (io/torch_pickle.h): only
// containers, scalars and tensor records are accepted; any other pickle global
// or opcode is an error naming it and is never executed.
// Used for the official TurboVAE `checkpoint.ckpt` and Wan2.2 `Wan2.2_VAE.pth`
// (spec magi2-pipeline.md §6.1, Appendix D).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace magi2 {

/// The tensors of one state dict read from a torch.save zip.
class TorchStateDict {
 public:
  /// The checkpoint file this came from (for error messages).
  const std::string& path() const { return path_; }
  /// Tensor names in the order they were saved.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  /// Contiguous CPU tensor (F32/BF16/F16/I64/I32/U8/BOOL as stored; a
  /// non-contiguous saved view is copied into contiguous order at load).
  /// Error naming the file and tensor if absent.
  const Tensor& get(const std::string& name) const;
  size_t size() const { return names_.size(); }

 private:
  friend TorchStateDict load_torch_checkpoint(const std::string& path, std::string_view dict_key);
  std::string path_;
  std::vector<std::string> names_;
  std::map<std::string, Tensor> tensors_;
};

/// Reads the state dict of a torch.save zip at `path`. With `dict_key` empty
/// the saved object itself must be a dict of tensors; otherwise it must be a
/// dict holding `dict_key` (e.g. "ema_state_dict", "state_dict") whose value is
/// that dict of tensors. Other top-level entries (optimizer state, counters)
/// are parsed (restricted) but not loaded. Errors (magi2::Error, one line
/// naming the file and the entry/tensor): not a zip / truncated / missing
/// data.pkl or storage, big-endian byteorder, disallowed pickle global or
/// opcode, missing `dict_key` (the keys present are listed), a value that is
/// not a tensor, a storage dtype with no DType here (e.g. float64), a tensor
/// extending beyond its storage or with more elements than it (stride-0 /
/// overlapping views), a zip entry claiming more bytes than its compressed
/// data can hold. All of these are checked before anything is allocated.
TorchStateDict load_torch_checkpoint(const std::string& path, std::string_view dict_key = "");

/// Name, shape and dtype of one saved tensor.
struct TorchTensorInfo {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
};

/// The tensors of the state dict chosen as load_torch_checkpoint does, from
/// data.pkl alone: no storage is read (memory planning). Errors: those of the
/// archive and the pickle, a value that is not a tensor, an unsupported dtype.
std::vector<TorchTensorInfo> torch_checkpoint_tensor_infos(const std::string& path, std::string_view dict_key = "");

/// The str keys of the saved object when it is a dict (in saved order), else
/// empty: lets a loader choose `dict_key` the way the official code does
/// ("ema_state_dict" if present, else "state_dict", else the object itself).
/// Same errors as load_torch_checkpoint for the archive and the pickle.
std::vector<std::string> torch_checkpoint_keys(const std::string& path);

/// Writes `tensors` (CPU; F32/BF16/F16/I64/I32/U8/BOOL; any strides, stored
/// contiguous) as a torch.save zip that torch.load (weights_only too) accepts:
/// the object is {wrap_key: OrderedDict(name -> tensor)}, or the OrderedDict
/// alone when `wrap_key` is empty. The archive folder is the file's stem, as
/// torch.save names it. Atomic (temp file + fsync + rename). Error naming the
/// path/tensor on an unsupported dtype, duplicate name or write failure.
void write_torch_checkpoint(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                            std::string_view wrap_key = "");

}  // namespace magi2
