// Restricted pickle reader / minimal writer for torch.save state dicts (see
// torch_pickle.h). The opcode set is the subset of pickle protocols 2-5 that
// torch.save emits for tensors and plain containers; anything else is refused.
#include "io/torch_pickle.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

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

// Values are built mutable (a container is filled in place, so SETITEMS and
// APPENDS cost what they add) and handed out const.
using MutPtr = std::shared_ptr<Value>;

MutPtr make(Value v) { return std::make_shared<Value>(std::move(v)); }

int depth_of(const std::vector<ValuePtr>& items) {
  int d = 0;
  for (const auto& it : items) d = std::max(d, it->depth);
  return d + 1;
}

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& what)
      : b_(bytes), what_(what), max_values_(bytes.size() / 2 + 64) {}

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
          check(stack_.size() == 1 && marks_.empty(), "stack not balanced at STOP (byte ", at, ")");
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
          need(n, "TUPLE", at);
          std::vector<ValuePtr> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(container(Value::Kind::Tuple, std::move(items)));
          break;
        }
        case 'a': {  // APPEND
          need(2, "APPEND", at);
          ValuePtr x = pop();
          fill(top(), {x}, false);
          break;
        }
        case 'e': {  // APPENDS
          auto items = pop_mark();
          need(1, "APPENDS", at);
          fill(top(), items, false);
          break;
        }
        case 'd': {  // DICT
          auto kv = pop_mark();
          MutPtr d = container(Value::Kind::Dict, {});
          fill(d, kv, true);
          push(d);
          break;
        }
        case 's': {  // SETITEM
          need(3, "SETITEM", at);
          ValuePtr v = pop();
          ValuePtr k = pop();
          fill(top(), {k, v}, true);
          break;
        }
        case 'u': {  // SETITEMS
          auto kv = pop_mark();
          need(1, "SETITEMS", at);
          fill(top(), kv, true);
          break;
        }
        case 'q': memo_put(u8(), at); break;           // BINPUT
        case 'r': memo_put(u32(), at); break;          // LONG_BINPUT
        case 0x94: memo_put(memo_.size(), at); break;  // MEMOIZE
        case 'h': push(memo_get(u8())); break;         // BINGET
        case 'j': push(memo_get(u32())); break;        // LONG_BINGET
        case 'J': push(make_int(static_cast<int32_t>(u32()))); break;  // BININT
        case 'K': push(make_int(u8())); break;                         // BININT1
        case 'M': {                                                    // BININT2
          const uint32_t lo = u8();
          push(make_int(lo | (uint32_t{u8()} << 8)));
          break;
        }
        case 0x8a: push(make_int(long1())); break;  // LONG1
        case 'N': push(counted(Value{})); break;
        case 0x88: case 0x89: {  // NEWTRUE / NEWFALSE
          Value v;
          v.kind = Value::Kind::Bool;
          v.b = op == 0x88;
          push(counted(std::move(v)));
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
          push(counted(std::move(v)));
          break;
        }
        case 'c': {  // GLOBAL "module\nname\n"
          std::string module = line();
          push(global(module, line()));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          need(2, "STACK_GLOBAL", at);
          ValuePtr name = pop();
          ValuePtr module = pop();
          check(module->kind == Value::Kind::Str && name->kind == Value::Kind::Str, "STACK_GLOBAL needs two str");
          push(global(module->s, name->s));
          break;
        }
        case 'R': {  // REDUCE
          need(2, "REDUCE", at);
          ValuePtr args = pop();
          ValuePtr fn = pop();
          push(reduce(fn, args));
          break;
        }
        case 'Q': need(1, "BINPERSID", at); push(persistent(pop())); break;
        case 'b': {  // BUILD: only OrderedDict's _metadata state, which is dropped
          need(2, "BUILD", at);
          pop();
          check(top()->kind == Value::Kind::Dict, "BUILD is only accepted on a dict (state dict metadata)");
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

  // Every value is counted against a budget proportional to the stream, so a
  // small file cannot make the reader build an outsized object graph.
  MutPtr counted(Value v) {
    check(++values_ <= max_values_, "more objects than a stream of ", b_.size(), " bytes can describe");
    return make(std::move(v));
  }
  MutPtr make_int(int64_t i) {
    Value v;
    v.kind = Value::Kind::Int;
    v.i = i;
    return counted(std::move(v));
  }

  // The stack above the innermost MARK is all an opcode may touch: pickle
  // forbids reaching below it, so doing so is an error, like running dry.
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void need(size_t n, const char* opname, size_t at) const {
    check(stack_.size() - floor() >= n, opname, " at byte ", at, " needs ", n, " stack item",
          n == 1 ? "" : "s", " above the last MARK (stack underflow)");
  }
  void push(MutPtr v) {
    check(v->depth <= kMaxDepth, "objects nested deeper than ", kMaxDepth);
    stack_.push_back(std::move(v));
  }
  MutPtr pop() {
    check(stack_.size() > floor(), "stack underflow at byte ", pos_);
    MutPtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  const MutPtr& top() const { return stack_.back(); }  // after need()
  std::vector<ValuePtr> pop_mark() {
    check(!marks_.empty(), "no MARK on the stack at byte ", pos_);
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  // The memo holds at most one slot per PUT opcode, i.e. is sized by the
  // stream, whatever indices the stream names.
  void memo_put(uint64_t idx, size_t at) {
    need(1, "memo PUT", at);
    memo_[idx] = top();
  }
  MutPtr memo_get(uint64_t idx) const {
    auto it = memo_.find(idx);
    check(it != memo_.end(), "memo index ", idx, " was never written");
    return it->second;
  }

  MutPtr str(std::string_view s) {
    Value v;
    v.kind = Value::Kind::Str;
    v.s = std::string(s);
    return counted(std::move(v));
  }
  MutPtr container(Value::Kind kind, std::vector<ValuePtr> items) {
    seal(items);
    Value v;
    v.kind = kind;
    v.depth = depth_of(items);
    v.items = std::move(items);
    return counted(std::move(v));
  }
  // A value placed inside a container is sealed: pickle may still mutate it
  // in place (lists and dicts are filled after being memoised), but torch.save
  // always finishes a container before nesting it, and refusing later changes
  // keeps the graph acyclic and every depth final.
  // (The set owns its values, so a freed address can never be mistaken for a
  // sealed one.)
  void seal(const std::vector<ValuePtr>& items) {
    for (const auto& it : items) sealed_.insert(it);
  }
  void fill(const MutPtr& c, const std::vector<ValuePtr>& items, bool as_dict) {
    const bool list = !as_dict;
    check(c->kind == (list ? Value::Kind::List : Value::Kind::Dict), list ? "APPEND on a non-list" : "SETITEM on a non-dict");
    check(!sealed_.count(c), "a ", list ? "list" : "dict",
          " is modified after being nested in another object (recursive structures are not supported)");
    for (const auto& it : items) check(it.get() != c.get(), "a container is inserted into itself");
    seal(items);
    if (list) {
      c->items.insert(c->items.end(), items.begin(), items.end());
      c->depth = std::max(c->depth, depth_of(items));
    } else {
      check(items.size() % 2 == 0, "odd number of items for a dict");
      for (size_t i = 0; i < items.size(); i += 2) {
        check(items[i]->kind == Value::Kind::Str || items[i]->kind == Value::Kind::Int,
              "dict key is not str or int");
        c->dict.emplace_back(items[i], items[i + 1]);
        c->depth = std::max(c->depth, items[i + 1]->depth + 1);
      }
    }
    check(c->depth <= kMaxDepth, "objects nested deeper than ", kMaxDepth);
  }

  MutPtr global(const std::string& module, const std::string& name) {
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
    return counted(std::move(v));
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

  MutPtr reduce(const ValuePtr& fn, const ValuePtr& args) {
    check(fn->kind == Value::Kind::Global, "REDUCE on a non-callable");
    check(args->kind == Value::Kind::Tuple, "REDUCE arguments are not a tuple");
    const auto& a = args->items;
    if (fn->s == "collections.OrderedDict") {
      check(a.empty(), "OrderedDict with constructor arguments is not supported");
      return container(Value::Kind::Dict, {});
    }
    if (fn->s == "torch._utils._rebuild_parameter") {
      check(a.size() == 3 && a[0]->kind == Value::Kind::Tensor, "malformed _rebuild_parameter record");
      Value v = *a[0];
      return counted(std::move(v));
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
      return counted(std::move(v));
    }
    fail("calling '", fn->s, "' is not allowed (restricted unpickler)");
  }

  MutPtr persistent(const ValuePtr& pid) {
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
    return counted(std::move(v));
  }

  std::string_view b_;
  const std::string& what_;
  size_t pos_ = 0;
  size_t values_ = 0;
  const size_t max_values_;
  std::vector<MutPtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, MutPtr> memo_;
  std::unordered_set<ValuePtr> sealed_;
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
