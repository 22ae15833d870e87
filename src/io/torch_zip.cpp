// torch.save zip checkpoints: libzip for the archive, io/torch_pickle for the
// object graph. See torch_zip.h for the layout.
#include "io/torch_zip.h"

#include <zip.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "core/error.h"
#include "io/mmap_file.h"
#include "io/torch_pickle.h"

namespace magi2 {
namespace {

using torch_pickle::Value;
using torch_pickle::ValuePtr;

constexpr uint64_t kMaxPickleBytes = 64ull << 20;
// Deflate cannot expand one byte into more than ~1032: an entry claiming a
// larger uncompressed size than that is lying, and is refused before its
// size is allocated.
constexpr uint64_t kMaxInflateRatio = 1032;

std::string zip_error_text(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string s = zip_error_strerror(&e);
  zip_error_fini(&e);
  return s;
}

struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};

/// An open archive with its folder prefix ("<archive>/").
class Archive {
 public:
  explicit Archive(const std::string& path) : path_(path) {
    int code = 0;
    zip_t* z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
    MAGI2_CHECK(z, path, ": cannot open as a PyTorch zip checkpoint (", zip_error_text(code), ")");
    zip_.reset(z);
    std::error_code ec;
    file_size_ = std::filesystem::file_size(path, ec);
    const zip_int64_t n = zip_get_num_entries(z, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      const char* name = zip_get_name(z, static_cast<zip_uint64_t>(i), 0);
      if (!name) continue;
      const std::string s = name;
      const size_t slash = s.find('/');
      if (slash != std::string::npos && s.substr(slash + 1) == "data.pkl") {
        MAGI2_CHECK(prefix_.empty(), path, ": more than one data.pkl in the archive");
        prefix_ = s.substr(0, slash + 1);
      }
    }
    MAGI2_CHECK(!prefix_.empty(), path, ": not a torch.save checkpoint (no <archive>/data.pkl entry)");
  }

  bool has(const std::string& rel) const { return zip_name_locate(zip_.get(), (prefix_ + rel).c_str(), 0) >= 0; }

  /// Size in bytes of entry prefix+rel; Error naming it if absent.
  uint64_t size_of(const std::string& rel) const {
    zip_stat_t st;
    zip_stat_init(&st);
    MAGI2_CHECK(zip_stat(zip_.get(), (prefix_ + rel).c_str(), 0, &st) == 0 && (st.valid & ZIP_STAT_SIZE), path_,
                ": entry '", prefix_, rel, "' is missing");
    const bool stored = (st.valid & ZIP_STAT_COMP_METHOD) && st.comp_method == ZIP_CM_STORE;
    MAGI2_CHECK((st.valid & ZIP_STAT_COMP_SIZE) && st.comp_size <= file_size_ &&
                    (stored ? st.size == st.comp_size : st.size / kMaxInflateRatio <= st.comp_size + 64),
                path_, ": entry '", prefix_, rel, "' claims ", st.size, " bytes from ", st.comp_size,
                " stored bytes (corrupt or a zip bomb)");
    return st.size;
  }

  /// Reads the whole entry, exactly `size` bytes, into dst (CRC checked by libzip).
  void read(const std::string& rel, void* dst, uint64_t size) const {
    zip_file_t* f = zip_fopen(zip_.get(), (prefix_ + rel).c_str(), 0);
    MAGI2_CHECK(f, path_, ": cannot open entry '", prefix_, rel, "' (", zip_strerror(zip_.get()), ")");
    uint64_t got = 0;
    bool ok = true;
    while (got < size) {
      const zip_int64_t r = zip_fread(f, static_cast<char*>(dst) + got, size - got);
      if (r <= 0) {
        ok = r == 0;
        break;
      }
      got += static_cast<uint64_t>(r);
    }
    if (ok && got == size) {  // libzip verifies the CRC when a read reaches the end of the entry
      char extra;
      ok = zip_fread(f, &extra, 1) == 0;
    }
    std::string err = ok ? "" : zip_file_strerror(f);
    zip_fclose(f);
    MAGI2_CHECK(ok && got == size, path_, ": entry '", prefix_, rel, "' is truncated or corrupt",
                err.empty() ? "" : " (", err, err.empty() ? "" : ")");
  }

  std::string read_string(const std::string& rel, uint64_t max_bytes) const {
    const uint64_t n = size_of(rel);
    MAGI2_CHECK(n <= max_bytes, path_, ": entry '", prefix_, rel, "' is implausibly large (", n, " bytes)");
    std::string s(n, '\0');
    read(rel, s.data(), n);
    return s;
  }

  const std::string& prefix() const { return prefix_; }

 private:
  std::string path_;
  std::unique_ptr<zip_t, ZipCloser> zip_;
  std::string prefix_;
  uint64_t file_size_ = 0;
};

bool mul_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

/// Copies a strided view of `src` (elements of `esize` bytes) into contiguous `dst`.
void strided_copy(const char* src, char* dst, const Shape& shape, const Shape& stride, size_t esize) {
  const size_t nd = shape.size();
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::vector<int64_t> idx(nd, 0);
  for (int64_t n = 0; n < numel; ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < nd; ++d) off += idx[d] * stride[d];
    std::memcpy(dst + n * static_cast<int64_t>(esize), src + off * static_cast<int64_t>(esize), esize);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

bool is_contiguous_record(const Shape& shape, const Shape& stride) {
  int64_t expect = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && stride[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

std::string key_text(const ValuePtr& k) { return k->kind == Value::Kind::Str ? k->s : std::to_string(k->i); }

}  // namespace

const Tensor& TorchStateDict::get(const std::string& name) const {
  auto it = tensors_.find(name);
  MAGI2_CHECK(it != tensors_.end(), path_, ": tensor '", name, "' is not in the checkpoint");
  return it->second;
}

namespace {

// Opens the archive, checks the byte order and parses data.pkl.
ValuePtr read_root(const Archive& ar, const std::string& path) {
  if (ar.has("byteorder")) {
    const std::string bo = ar.read_string("byteorder", 64);
    MAGI2_CHECK(bo == "little", path, ": byteorder '", bo, "' is not supported (little-endian only)");
  }
  const std::string pkl = ar.read_string("data.pkl", kMaxPickleBytes);
  return torch_pickle::parse(pkl, path + ": " + ar.prefix() + "data.pkl");
}

}  // namespace

std::vector<std::string> torch_checkpoint_keys(const std::string& path) {
  Archive ar(path);
  ValuePtr root = read_root(ar, path);
  std::vector<std::string> keys;
  if (root->kind == Value::Kind::Dict)
    for (const auto& kv : root->dict)
      if (kv.first->kind == Value::Kind::Str) keys.push_back(kv.first->s);
  return keys;
}

namespace {

// The dict of tensors inside the saved object (see load_torch_checkpoint).
ValuePtr state_dict_of(const ValuePtr& root, const std::string& path, std::string_view dict_key) {
  ValuePtr dict = root;
  if (!dict_key.empty()) {
    MAGI2_CHECK(root->kind == Value::Kind::Dict, path, ": saved object is not a dict, so it has no '", dict_key, "'");
    dict = nullptr;
    std::string present;
    for (const auto& [k, v] : root->dict) {
      if (k->kind == Value::Kind::Str && k->s == dict_key) dict = v;
      present += (present.empty() ? "" : ", ") + key_text(k);
    }
    MAGI2_CHECK(dict, path, ": no '", dict_key, "' entry (top-level keys: ", present, ")");
  }
  MAGI2_CHECK(dict->kind == Value::Kind::Dict, path, ": ", dict_key.empty() ? "saved object" : dict_key,
              " is not a dict of tensors");
  return dict;
}

}  // namespace

std::vector<TorchTensorInfo> torch_checkpoint_tensor_infos(const std::string& path, std::string_view dict_key) {
  Archive ar(path);
  const ValuePtr dict = state_dict_of(read_root(ar, path), path, dict_key);
  std::vector<TorchTensorInfo> out;
  for (const auto& [k, v] : dict->dict) {
    const std::string name = key_text(k);
    MAGI2_CHECK(v->kind == Value::Kind::Tensor, path, ": entry '", name, "' is not a tensor");
    MAGI2_CHECK(v->tensor.dtype_known, path, ": tensor '", name, "' has storage type ", v->tensor.storage_type,
                ", which is not supported");
    out.push_back({name, v->tensor.shape, v->tensor.dtype});
  }
  return out;
}

TorchStateDict load_torch_checkpoint(const std::string& path, std::string_view dict_key) {
  Archive ar(path);
  const ValuePtr dict = state_dict_of(read_root(ar, path), path, dict_key);

  TorchStateDict out;
  out.path_ = path;
  std::map<std::string, Tensor> storages;  // key -> bytes (U8), loaded once
  for (const auto& [k, v] : dict->dict) {
    const std::string name = key_text(k);
    MAGI2_CHECK(v->kind == Value::Kind::Tensor, path, ": entry '", name, "' is not a tensor");
    MAGI2_CHECK(!out.tensors_.count(name), path, ": tensor '", name, "' appears twice");
    const auto& r = v->tensor;
    MAGI2_CHECK(r.dtype_known, path, ": tensor '", name, "' has storage type ", r.storage_type,
                ", which is not supported (float32/bfloat16/float16/int64/int32/uint8/bool)");
    const int64_t esize = static_cast<int64_t>(dtype_size(r.dtype));
    int64_t storage_bytes = 0;
    MAGI2_CHECK(mul_ok(r.storage_numel, esize, &storage_bytes), path, ": tensor '", name, "': storage too large");

    // Bounds: every element index offset + sum(i_d * stride_d) inside the storage.
    int64_t numel = 1, last = r.offset;
    bool ok = r.offset >= 0;
    for (size_t d = 0; d < r.shape.size() && ok; ++d) {
      int64_t span = 0;
      ok = r.shape[d] >= 0 && r.stride[d] >= 0 && mul_ok(numel, r.shape[d], &numel);
      if (ok && r.shape[d] > 0) ok = mul_ok(r.shape[d] - 1, r.stride[d], &span) && !__builtin_add_overflow(last, span, &last);
    }
    MAGI2_CHECK(ok && (numel == 0 || last < r.storage_numel), path, ": tensor '", name, "' (shape ",
                shape_str(r.shape), ", offset ", r.offset, ") extends beyond its storage of ", r.storage_numel,
                " elements");
    // A state dict's tensors never hold more elements than their storage: a
    // record that does (stride-0 / overlapping views) would make a few bytes
    // expand into an arbitrarily large copy, so it is refused before any
    // allocation.
    MAGI2_CHECK(numel <= r.storage_numel, path, ": tensor '", name, "' (shape ", shape_str(r.shape), ", stride ",
                shape_str(r.stride), ") has ", numel, " elements but its storage only ", r.storage_numel,
                " (overlapping views are not supported)");

    auto sit = storages.find(r.storage_key);
    if (sit == storages.end()) {
      const std::string rel = "data/" + r.storage_key;
      const uint64_t have = ar.size_of(rel);
      MAGI2_CHECK(have >= static_cast<uint64_t>(storage_bytes), path, ": storage '", r.storage_key, "' of tensor '",
                  name, "' holds ", have, " bytes, expected ", storage_bytes);
      Tensor bytes = Tensor::empty({std::max<int64_t>(static_cast<int64_t>(have), 1)}, DType::U8);
      ar.read(rel, bytes.data(), have);
      sit = storages.emplace(r.storage_key, bytes).first;
    }
    const Tensor& st = sit->second;
    char* base = static_cast<char*>(st.data()) + r.offset * esize;
    Tensor t;
    if (is_contiguous_record(r.shape, r.stride)) {
      t = Tensor::view_of(base, r.shape, r.dtype, st.owner());
    } else {
      t = Tensor::empty(r.shape, r.dtype);
      strided_copy(base, static_cast<char*>(t.data()), r.shape, r.stride, static_cast<size_t>(esize));
    }
    out.names_.push_back(name);
    out.tensors_.emplace(name, std::move(t));
  }
  return out;
}

void write_torch_checkpoint(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                            std::string_view wrap_key) {
  std::string archive = std::filesystem::path(path).stem().string();
  if (archive.empty()) archive = "archive";

  std::vector<torch_pickle::WriteEntry> entries;
  std::vector<Tensor> data;  // contiguous copies, alive until the zip is closed
  std::set<std::string> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    MAGI2_CHECK(seen.insert(name).second, path, ": tensor '", name, "' given twice");
    MAGI2_CHECK(t.defined() && t.device() == Device::CPU, path, ": tensor '", name, "' is not a CPU tensor");
    torch_pickle::WriteEntry e{name, t.dtype(), t.shape(), std::to_string(i)};
    torch_pickle::storage_type_of(t.dtype());  // rejects dtypes torch cannot hold here
    entries.push_back(std::move(e));
    if (t.is_contiguous()) {
      data.push_back(t);
    } else {
      Tensor c = Tensor::empty(t.shape(), t.dtype());
      strided_copy(static_cast<const char*>(t.data()), static_cast<char*>(c.data()), t.shape(), t.strides(),
                   dtype_size(t.dtype()));
      data.push_back(c);
    }
  }
  const std::string pkl = torch_pickle::write_state_dict(entries, wrap_key);
  static const std::string kByteorder = "little", kVersion = "3\n";

  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* mem = zip_source_buffer_create(nullptr, 0, 0, &err);
  MAGI2_CHECK(mem, path, ": cannot create the zip buffer (", zip_error_strerror(&err), ")");
  zip_source_keep(mem);
  std::unique_ptr<zip_source_t, void (*)(zip_source_t*)> mem_owner(mem, zip_source_free);
  zip_t* z = zip_open_from_source(mem, ZIP_TRUNCATE, &err);
  MAGI2_CHECK(z, path, ": cannot create the zip (", zip_error_strerror(&err), ")");
  std::unique_ptr<zip_t, ZipCloser> zip(z);
  auto add = [&](const std::string& rel, const void* bytes, size_t n) {
    zip_source_t* s = zip_source_buffer(z, bytes, n, 0);
    const zip_int64_t idx = s ? zip_file_add(z, (archive + "/" + rel).c_str(), s, ZIP_FL_ENC_UTF_8) : -1;
    if (s && idx < 0) zip_source_free(s);
    // A fixed entry time (1980-01-01 00:00, the DOS epoch) keeps the bytes a
    // function of the tensors alone: same seed, same file.
    MAGI2_CHECK(idx >= 0 && zip_set_file_compression(z, static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0) == 0 &&
                    zip_file_set_dostime(z, static_cast<zip_uint64_t>(idx), 0, (0 << 9) | (1 << 5) | 1, 0) == 0,
                path, ": cannot add '", rel, "' (", zip_strerror(z), ")");
  };
  add("data.pkl", pkl.data(), pkl.size());
  add("byteorder", kByteorder.data(), kByteorder.size());
  for (size_t i = 0; i < data.size(); ++i) add("data/" + entries[i].storage_key, data[i].data(), data[i].nbytes());
  add("version", kVersion.data(), kVersion.size());
  MAGI2_CHECK(zip_close(z) == 0, path, ": cannot finish the zip (", zip_strerror(z), ")");
  zip.release();

  zip_stat_t st;
  zip_stat_init(&st);
  MAGI2_CHECK(zip_source_stat(mem, &st) == 0 && (st.valid & ZIP_STAT_SIZE) && zip_source_open(mem) == 0, path,
              ": cannot read back the zip buffer");
  std::string bytes(st.size, '\0');
  const zip_int64_t got = zip_source_read(mem, bytes.data(), st.size);
  zip_source_close(mem);
  MAGI2_CHECK(got == static_cast<zip_int64_t>(st.size), path, ": cannot read back the zip buffer");
  write_file_atomic(path, bytes);
}

}  // namespace magi2
