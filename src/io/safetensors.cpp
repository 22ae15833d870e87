#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_depth.h"

namespace magi2 {

using json = nlohmann::json;

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  f->file_ = MappedFile::open(path);
  const size_t size = f->file_->size();
  const unsigned char* p = f->file_->data();
  if (size < 8)
    throw Error(str_cat("safetensors '", path, "': file is truncated (", size,
                        " bytes, less than the 8-byte header length)"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | p[i];
  if (n > kSafetensorsMaxHeader)
    throw Error(str_cat("safetensors '", path, "': header length ", n, " exceeds the limit of ",
                        kSafetensorsMaxHeader, " bytes"));
  if (n > size - 8)
    throw Error(str_cat("safetensors '", path, "': file is truncated (header of ", n,
                        " bytes but only ", size - 8, " bytes follow)"));
  f->data_start_ = 8 + n;
  const size_t data_size = size - f->data_start_;
  const std::string_view header(reinterpret_cast<const char*>(p + 8), n);
  check_json_depth(header, str_cat("safetensors '", path, "': header"));
  // The format forbids repeated names; a JSON object would silently keep the
  // last one, so the top-level keys are watched while parsing.
  std::set<std::string> names;
  std::string repeated;
  const json::parser_callback_t watch = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && repeated.empty() &&
        !names.insert(parsed.get<std::string>()).second)
      repeated = parsed.get<std::string>();
    return true;
  };
  json h;
  try {
    h = json::parse(header.begin(), header.end(), watch);
  } catch (const json::exception& e) {
    throw Error(str_cat("safetensors '", path, "': header is not valid JSON (", e.what(), ")"));
  }
  if (!h.is_object()) throw Error(str_cat("safetensors '", path, "': header is not a JSON object"));
  if (!repeated.empty())
    throw Error(str_cat("safetensors '", path, "': tensor name '", repeated, "' appears twice in the header"));
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error(str_cat("safetensors '", path, "': __metadata__ is not an object"));
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw Error(str_cat("safetensors '", path, "': __metadata__ value '", m.key(),
                              "' is not a string"));
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) {
      return Error(str_cat("safetensors '", path, "': tensor '", name, "': ", why));
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      throw bad("entry needs dtype, shape and data_offsets");
    SafetensorsEntry e;
    e.name = name;
    if (!v["dtype"].is_string() || !dtype_from_name(v["dtype"].get<std::string>(), &e.dtype))
      throw bad(str_cat("unknown dtype ", v["dtype"].dump()));
    if (!v["shape"].is_array()) throw bad("shape is not an array");
    unsigned __int128 numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) throw bad(str_cat("bad dimension ", d.dump()));
      e.shape.push_back(d.get<int64_t>());
      numel *= static_cast<uint64_t>(d.get<int64_t>());
      if (numel > (static_cast<unsigned __int128>(1) << 62)) throw bad("shape overflows");
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw bad("data_offsets must be two non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.end < e.begin) throw bad(str_cat("data_offsets [", e.begin, ", ", e.end, "] are reversed"));
    if (e.end > data_size)
      throw bad(str_cat("data_offsets [", e.begin, ", ", e.end, "] lie outside the file (data section has ",
                        data_size, " bytes)"));
    const unsigned __int128 want = numel * dtype_size(e.dtype);
    if (want != e.end - e.begin)
      throw bad(str_cat("byte size ", e.end - e.begin, " does not match dtype ", dtype_name(e.dtype),
                        " x shape ", shape_str(e.shape), " = ", static_cast<uint64_t>(want), " bytes"));
    f->entries_.push_back(std::move(e));
  }
  // Empty tensors own no bytes and are left out: sorted between two overlapping
  // tensors they would break the adjacent-pair check below and hide the overlap.
  std::vector<size_t> order;
  for (size_t i = 0; i < f->entries_.size(); ++i)
    if (f->entries_[i].end > f->entries_[i].begin) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return f->entries_[a].begin < f->entries_[b].begin;
  });
  // Compare each tensor with the one reaching furthest so far, so an overlap
  // with any earlier tensor is found, not only with the neighbour.
  size_t reach = 0;
  for (size_t i = 1; i < order.size(); ++i) {
    if (f->entries_[order[i - 1]].end > f->entries_[order[reach]].end) reach = i - 1;
    const auto& a = f->entries_[order[reach]];
    const auto& b = f->entries_[order[i]];
    if (b.begin < a.end)
      throw Error(str_cat("safetensors '", path, "': tensors '", a.name, "' and '", b.name,
                          "' overlap (bytes [", a.begin, ", ", a.end, ") and [", b.begin, ", ", b.end, "))"));
  }
  for (size_t i = 0; i < f->entries_.size(); ++i) f->index_[f->entries_[i].name] = i;
  return f;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error(str_cat("safetensors '", path(), "': no tensor '", name, "'"));
  return entries_[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const auto& e = entry(name);
  auto* ptr = const_cast<unsigned char*>(file_->data() + data_start_ + e.begin);
  // Views alias the mapping; the shared_ptr keeps the mapping alive.
  return Tensor::view_of(ptr, e.shape, e.dtype, std::static_pointer_cast<void>(file_));
}

namespace {

// The 8-byte length and the JSON header (padded to 8 bytes) of `specs`, and the
// data section's size.
std::string safetensors_header(const std::vector<SafetensorsSpec>& specs,
                               const std::map<std::string, std::string>& metadata, size_t* data_bytes) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  size_t off = 0;
  for (const SafetensorsSpec& s : specs) {
    MAGI2_CHECK(!h.contains(s.name), "write_safetensors: duplicate tensor name '", s.name, "'");
    size_t n = dtype_size(s.dtype);
    for (int64_t d : s.shape) n *= static_cast<size_t>(d);
    h[s.name] = {{"dtype", std::string(dtype_name(s.dtype))}, {"shape", s.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string hs = h.dump();
  while ((8 + hs.size()) % 8) hs.push_back(' ');  // align the data section to 8 bytes
  std::string out;
  const uint64_t n = hs.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  *data_bytes = off;
  return out + hs;
}

}  // namespace

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsSpec> specs;
  for (const auto& [name, t] : tensors) {
    MAGI2_CHECK(t.device() == Device::CPU && t.is_contiguous(), "write_safetensors: tensor '", name,
                "' must be a contiguous CPU tensor");
    specs.push_back({name, t.shape(), t.dtype()});
  }
  size_t data = 0;
  std::string out = safetensors_header(specs, metadata, &data);
  out.reserve(out.size() + data);
  for (const auto& [name, t] : tensors) out.append(static_cast<const char*>(t.data()), t.nbytes());
  write_file_atomic(path, out);
}

void write_safetensors_streamed(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                                const std::function<Tensor(size_t)>& make,
                                const std::map<std::string, std::string>& metadata, bool sync) {
  size_t data = 0;
  const std::string header = safetensors_header(specs, metadata, &data);
  AtomicFileWriter w(path);
  w.write(header.data(), header.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const Tensor t = make(i);
    MAGI2_CHECK(t.defined() && t.device() == Device::CPU && t.is_contiguous() && t.shape() == specs[i].shape &&
                    t.dtype() == specs[i].dtype,
                "write_safetensors '", path, "': tensor '", specs[i].name, "' was made as ",
                t.defined() ? str_cat(dtype_name(t.dtype()), " ", shape_str(t.shape())) : std::string("nothing"),
                ", expected a contiguous CPU ", dtype_name(specs[i].dtype), " ", shape_str(specs[i].shape));
    w.write(t.data(), t.nbytes());
  }
  w.commit(sync);
}

}  // namespace magi2
