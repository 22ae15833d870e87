// Restricted pickle reader / minimal writer for torch.save state dicts (see
// torch_pickle.h). The opcode set is the subset of pickle protocols 2-5 that
// torch.save emits for tensors and plain containers; anything else is refused.
#include "io/torch_pickle.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <unordered_map>

#include "core/error.h"

namespace magi2::torch_pickle {
namespace {

constexpr int kMaxDepth = 64;

struct StorageDType {
  const char* name;
  DType dtype;
};
// Typed storage classes torch.save writes (torch/storage.py _LegacyStorage
// subclasses); ones without a DType here parse but cannot be materialised.
constexpr StorageDType kStorageTypes[] = {
    {"FloatStorage", DType::F32}, {"BFloat16Storage", DType::BF16}, {"HalfStorage", DType::F16},
    {"LongStorage", DType::I64},  {"IntStorage", DType::I32},       {"ByteStorage", DType::U8},
    {"BoolStorage", DType::BOOL},
};
constexpr const char* kOtherStorageTypes[] = {"DoubleStorage", "ShortStorage", "CharStorage",
                                              "ComplexFloatStorage", "ComplexDoubleStorage"};

ValuePtr make(Value v) { return std::make_shared<const Value>(std::move(v)); }

ValuePtr make_int(int64_t i) {
  Value v;
  v.kind = Value::Kind::Int;
  v.i = i;
  return make(std::move(v));
}

int depth_of(const std::vector<ValuePtr>& items) {
  int d = 0;
  for (const auto& it : items) d = std::max(d, it->depth);
  return d + 1;
}

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& what) : b_(bytes), what_(what) {}

  ValuePtr run() {
    while (true) {
      const size_t at = pos_;
      const uint8_t op = u8();
      switch (op) {
        case 0x80: {  // PROTO
          const uint8_t p = u8();
          check(p >= 2 && p <= 5, "unsupported pickle protocol ", int(p));
          break;
        }
        case 0x95: take(8); break;  // FRAME: a length hint only
        case '.': {                 // STOP
          check(stack_.size() == 1 && marks_.empty(), "stack not balanced at STOP");
          return stack_.back();
        }
        case '(': marks_.push_back(stack_.size()); break;
        case '}': push(container(Value::Kind::Dict, {})); break;
        case ']': push(container(Value::Kind::List, {})); break;
        case ')': push(container(Value::Kind::Tuple, {})); break;
        case 't': push(container(Value::Kind::Tuple, pop_mark())); break;
        case 'l': push(container(Value::Kind::List, pop_mark())); break;
        case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84;
          check(stack_.size() >= n, "stack underflow");
          std::vector<ValuePtr> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(container(Value::Kind::Tuple, std::move(items)));
          break;
        }
        case 'a': {  // APPEND
          ValuePtr x = pop();
          push(extend(pop(), {x}));
          break;
        }
        case 'e': {  // APPENDS
          auto items = pop_mark();
          push(extend(pop(), items));
          break;
        }
        case 'd': push(dict_with(container(Value::Kind::Dict, {}), pop_mark())); break;
        case 's': {  // SETITEM
          ValuePtr v = pop();
          ValuePtr k = pop();
          push(dict_with(pop(), {k, v}));
          break;
        }
        case 'u': {  // SETITEMS
          auto kv = pop_mark();
          push(dict_with(pop(), kv));
          break;
        }
        case 'q': memo_put(u8()); break;             // BINPUT
        case 'r': memo_put(u32()); break;            // LONG_BINPUT
        case 0x94: memo_put(memo_.size()); break;    // MEMOIZE
        case 'h': push(memo_get(u8())); break;       // BINGET
        case 'j': push(memo_get(u32())); break;      // LONG_BINGET
        case 'J': push(make_int(static_cast<int32_t>(u32()))); break;  // BININT
        case 'K': push(make_int(u8())); break;                         // BININT1
        case 'M': {                                                    // BININT2
          const uint32_t lo = u8();
          push(make_int(lo | (uint32_t{u8()} << 8)));
          break;
        }
        case 0x8a: push(make_int(long1())); break;  // LONG1
        case 'N': push(make(Value{})); break;
        case 0x88: case 0x89: {  // NEWTRUE / NEWFALSE
          Value v;
          v.kind = Value::Kind::Bool;
          v.b = op == 0x88;
          push(make(std::move(v)));
          break;
        }
        case 'X': push(str(take(u32()))); break;   // BINUNICODE
        case 0x8c: push(str(take(u8()))); break;   // SHORT_BINUNICODE
        case 0x8d: push(str(take(u64()))); break;  // BINUNICODE8
        case 'G': {                                // BINFLOAT (big-endian double)
          uint64_t bits = 0;
          for (char c : take(8)) bits = (bits << 8) | static_cast<uint8_t>(c);
          Value v;
          v.kind = Value::Kind::Float;
          std::memcpy(&v.f, &bits, 8);
          push(make(std::move(v)));
          break;
        }
        case 'c': {  // GLOBAL "module\nname\n"
          std::string module = line();
          push(global(module, line()));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          ValuePtr name = pop();
          ValuePtr module = pop();
          check(module->kind == Value::Kind::Str && name->kind == Value::Kind::Str, "STACK_GLOBAL needs two str");
          push(global(module->s, name->s));
          break;
        }
        case 'R': {  // REDUCE
          ValuePtr args = pop();
          push(reduce(pop(), args));
          break;
        }
        case 'Q': push(persistent(pop())); break;  // BINPERSID
        case 'b': {                                // BUILD: only OrderedDict's _metadata state
          ValuePtr state = pop();
          check(!stack_.empty() && stack_.back()->kind == Value::Kind::Dict,
                "BUILD is only accepted on a dict (state dict metadata)");
          (void)state;
          break;
        }
        default:
          fail("pickle opcode 0x", hex(op), " at byte ", at, " is not supported (restricted unpickler)");
      }
    }
  }

 private:
  template <typename... A>
  [[noreturn]] void fail(A&&... a) const {
    throw Error(str_cat(what_, ": ", std::forward<A>(a)...));
  }
  template <typename... A>
  void check(bool ok, A&&... a) const {
    if (!ok) fail(std::forward<A>(a)...);
  }
  static std::string hex(uint8_t v) {
    const char* d = "0123456789abcdef";
    return {d[v >> 4], d[v & 15]};
  }

  std::string_view take(uint64_t n) {
    check(n <= b_.size() - pos_, "truncated pickle stream at byte ", pos_);
    std::string_view s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  uint64_t le(int n) {
    std::string_view s = take(n);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[i]);
    return v;
  }
  uint32_t u32() { return static_cast<uint32_t>(le(4)); }
  uint64_t u64() { return le(8); }
  int64_t long1() {
    const uint8_t n = u8();
    check(n <= 8, "integer of ", int(n), " bytes is too large");
    if (n == 0) return 0;
    uint64_t v = le(n);
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<int64_t>(v);
  }
  std::string line() {
    const size_t nl = b_.find('\n', pos_);
    check(nl != std::string_view::npos && nl - pos_ < 256, "bad GLOBAL name at byte ", pos_);
    std::string s(b_.substr(pos_, nl - pos_));
    pos_ = nl + 1;
    return s;
  }

  void push(ValuePtr v) {
    check(v->depth <= kMaxDepth, "objects nested deeper than ", kMaxDepth);
    stack_.push_back(std::move(v));
  }
  ValuePtr pop() {
    check(!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back()), "stack underflow");
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  std::vector<ValuePtr> pop_mark() {
    check(!marks_.empty(), "no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  void memo_put(size_t idx) {
    check(!stack_.empty(), "memo write with an empty stack");
    check(idx <= memo_.size() + (1u << 20), "memo index ", idx, " out of range");
    if (idx >= memo_.size()) memo_.resize(idx + 1);
    if (memo_[idx]) {
      auto& old = memo_of_[memo_[idx].get()];
      old.erase(std::remove(old.begin(), old.end(), idx), old.end());
    }
    memo_[idx] = stack_.back();
    memo_of_[memo_[idx].get()].push_back(idx);
  }
  ValuePtr memo_get(size_t idx) {
    check(idx < memo_.size() && memo_[idx], "memo index ", idx, " was never written");
    return memo_[idx];
  }

  static ValuePtr str(std::string_view s) {
    Value v;
    v.kind = Value::Kind::Str;
    v.s = std::string(s);
    return make(std::move(v));
  }
  static ValuePtr container(Value::Kind kind, std::vector<ValuePtr> items) {
    Value v;
    v.kind = kind;
    v.depth = depth_of(items);
    v.items = std::move(items);
    return make(std::move(v));
  }
  // Values are immutable (so no reference cycles can form): filling a
  // container makes a new value, and the memo slots and stack entries that held
  // the old one are pointed at the new one, which is what pickle's in-place
  // mutation means for them (torch.save memoises a dict before its SETITEMS).
  void rebind(const ValuePtr& from, const ValuePtr& to) {
    auto it = memo_of_.find(from.get());
    if (it != memo_of_.end()) {
      std::vector<size_t> slots = std::move(it->second);
      memo_of_.erase(it);
      for (size_t i : slots) memo_[i] = to;
      memo_of_[to.get()] = std::move(slots);
    }
    for (auto& e : stack_)
      if (e == from) e = to;
  }
  ValuePtr extend(const ValuePtr& list, const std::vector<ValuePtr>& items) {
    check(list->kind == Value::Kind::List, "APPEND on a non-list");
    Value v = *list;
    v.items.insert(v.items.end(), items.begin(), items.end());
    v.depth = std::max(v.depth, depth_of(items));
    ValuePtr out = make(std::move(v));
    rebind(list, out);
    return out;
  }
  ValuePtr dict_with(const ValuePtr& d, const std::vector<ValuePtr>& kv) {
    check(d->kind == Value::Kind::Dict, "SETITEM on a non-dict");
    check(kv.size() % 2 == 0, "odd number of items for a dict");
    Value v = *d;
    for (size_t i = 0; i < kv.size(); i += 2) {
      check(kv[i]->kind == Value::Kind::Str || kv[i]->kind == Value::Kind::Int, "dict key is not str or int");
      v.dict.emplace_back(kv[i], kv[i + 1]);
      v.depth = std::max({v.depth, kv[i + 1]->depth + 1});
    }
    ValuePtr out = make(std::move(v));
    rebind(d, out);
    return out;
  }

  ValuePtr global(const std::string& module, const std::string& name) {
    const std::string full = module + "." + name;
    bool ok = full == "collections.OrderedDict" || full == "torch._utils._rebuild_tensor_v2" ||
              full == "torch._utils._rebuild_parameter";
    if (module == "torch") {
      for (const auto& st : kStorageTypes) ok = ok || name == st.name;
      for (const char* st : kOtherStorageTypes) ok = ok || name == st;
    }
    check(ok, "pickle global '", full, "' is not allowed (restricted unpickler: only state-dict tensors)");
    Value v;
    v.kind = Value::Kind::Global;
    v.s = full;
    return make(std::move(v));
  }

  int64_t int_of(const ValuePtr& v, const char* what) const {
    check(v->kind == Value::Kind::Int, "tensor record: ", what, " is not an int");
    return v->i;
  }
  Shape ints_of(const ValuePtr& v, const char* what) const {
    check(v->kind == Value::Kind::Tuple, "tensor record: ", what, " is not a tuple");
    Shape s;
    for (const auto& x : v->items) s.push_back(int_of(x, what));
    return s;
  }

  ValuePtr reduce(const ValuePtr& fn, const ValuePtr& args) {
    check(fn->kind == Value::Kind::Global, "REDUCE on a non-callable");
    check(args->kind == Value::Kind::Tuple, "REDUCE arguments are not a tuple");
    const auto& a = args->items;
    if (fn->s == "collections.OrderedDict") {
      check(a.empty(), "OrderedDict with constructor arguments is not supported");
      return container(Value::Kind::Dict, {});
    }
    if (fn->s == "torch._utils._rebuild_parameter") {
      check(a.size() == 3 && a[0]->kind == Value::Kind::Tensor, "malformed _rebuild_parameter record");
      return a[0];
    }
    if (fn->s == "torch._utils._rebuild_tensor_v2") {
      // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
      check(a.size() == 6 || a.size() == 7, "_rebuild_tensor_v2 with ", a.size(), " arguments");
      check(a[0]->kind == Value::Kind::Storage, "_rebuild_tensor_v2: first argument is not a storage");
      Value v;
      v.kind = Value::Kind::Tensor;
      v.tensor = a[0]->tensor;
      v.tensor.offset = int_of(a[1], "storage_offset");
      v.tensor.shape = ints_of(a[2], "size");
      v.tensor.stride = ints_of(a[3], "stride");
      check(v.tensor.shape.size() == v.tensor.stride.size(), "tensor record: size and stride differ in rank");
      return make(std::move(v));
    }
    fail("calling '", fn->s, "' is not allowed (restricted unpickler)");
  }

  ValuePtr persistent(const ValuePtr& pid) {
    // ('storage', torch.<X>Storage, key, location, numel)
    check(pid->kind == Value::Kind::Tuple && pid->items.size() == 5 && pid->items[0]->kind == Value::Kind::Str &&
              pid->items[0]->s == "storage",
          "persistent id is not a ('storage', type, key, location, numel) record");
    const auto& it = pid->items;
    check(it[1]->kind == Value::Kind::Global && it[1]->s.rfind("torch.", 0) == 0 && it[1]->s.ends_with("Storage"),
          "storage record without a torch storage type");
    check(it[2]->kind == Value::Kind::Str && !it[2]->s.empty() && it[2]->s.size() < 64, "storage key is not a name");
    for (char c : it[2]->s)
      check(std::isalnum(static_cast<unsigned char>(c)) || c == '_', "storage key '", it[2]->s, "' is not a plain name");
    check(it[3]->kind == Value::Kind::Str, "storage location is not a str");
    Value v;
    v.kind = Value::Kind::Storage;
    v.tensor.storage_type = it[1]->s.substr(6);
    v.tensor.storage_key = it[2]->s;
    v.tensor.storage_numel = int_of(it[4], "storage numel");
    check(v.tensor.storage_numel >= 0, "negative storage size");
    for (const auto& st : kStorageTypes)
      if (v.tensor.storage_type == st.name) {
        v.tensor.dtype_known = true;
        v.tensor.dtype = st.dtype;
      }
    return make(std::move(v));
  }

  std::string_view b_;
  const std::string& what_;
  size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::vector<ValuePtr> memo_;
  std::unordered_map<const Value*, std::vector<size_t>> memo_of_;  // value -> its memo slots
};

// ------------------------------------------------------------------ writer

class Writer {
 public:
  void op(uint8_t o) { out_.push_back(static_cast<char>(o)); }
  void str(std::string_view s) {
    op('X');
    le(s.size(), 4);
    out_.append(s);
  }
  void integer(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');
      le(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    } else {
      op(0x8a);
      op(8);
      le(static_cast<uint64_t>(v), 8);
    }
  }
  void global(std::string_view module, std::string_view name) {
    op('c');
    out_.append(module).push_back('\n');
    out_.append(name).push_back('\n');
  }
  void ints(const Shape& s) {
    op('(');
    for (int64_t v : s) integer(v);
    op('t');
  }
  void empty_ordered_dict() {
    global("collections", "OrderedDict");
    op(')');
    op('R');
  }
  std::string take() { return std::move(out_); }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

}  // namespace

ValuePtr parse(std::string_view bytes, const std::string& what) { return Reader(bytes, what).run(); }

std::string storage_type_of(DType dtype) {
  for (const auto& st : kStorageTypes)
    if (st.dtype == dtype) return st.name;
  throw Error(str_cat("torch checkpoint writer: dtype ", dtype_name(dtype), " has no torch storage type here"));
}

std::string write_state_dict(const std::vector<WriteEntry>& entries, std::string_view wrap_key) {
  Writer w;
  w.op(0x80);
  w.op(2);
  if (!wrap_key.empty()) {
    w.op('}');
    w.str(wrap_key);
  }
  w.empty_ordered_dict();
  w.op('(');
  for (const auto& e : entries) {
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    w.str(e.name);
    w.global("torch._utils", "_rebuild_tensor_v2");
    w.op('(');
    w.op('(');  // persistent id
    w.str("storage");
    w.global("torch", storage_type_of(e.dtype));
    w.str(e.storage_key);
    w.str("cpu");
    w.integer(numel);
    w.op('t');
    w.op('Q');
    w.integer(0);
    w.ints(e.shape);
    w.ints(contiguous_strides(e.shape));
    w.op(0x89);  // requires_grad False
    w.empty_ordered_dict();
    w.op('t');
    w.op('R');
  }
  w.op('u');
  if (!wrap_key.empty()) w.op('s');
  w.op('.');
  return w.take();
}

}  // namespace magi2::torch_pickle
