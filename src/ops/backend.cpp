// Backend helpers shared by every backend: the default step recording and the
// host <-> device staging helpers declared in ops.h.
#include "core/error.h"
#include "ops/ops.h"

namespace magi2 {

namespace {

// The CPU's "graph": the body itself, re-run in order on each launch.
class BodyGraph final : public StepGraph {
 public:
  explicit BodyGraph(std::function<void()> body) : body_(std::move(body)) {}
  void launch() override { body_(); }

 private:
  std::function<void()> body_;
};

}  // namespace

std::unique_ptr<StepGraph> Backend::capture(std::function<void()> body) {
  MAGI2_CHECK(static_cast<bool>(body), "capture: empty step body");
  return std::make_unique<BodyGraph>(std::move(body));
}

void Backend::block_sparse_attention(const BlockSparseAttentionParams&) {
  throw Error(str_cat("block_sparse_attention: not implemented on the ", name(), " backend (the refiner runs on cpu)"));
}

Tensor to_backend(Backend& be, const Tensor& t) {
  if (!t.defined() || (t.device() == be.device() && t.is_contiguous())) return t;
  Tensor d = be.alloc(t.shape(), t.dtype());
  be.copy({.src = t, .dst = d});  // copy takes contiguous or 2-D row-strided views
  return d;
}

void to_backend_in_place(Backend& be, const std::vector<Tensor*>& tensors, const char* what) {
  std::vector<CopyParams> copies;
  for (Tensor* t : tensors) {
    if (!t->defined() || t->device() == be.device()) continue;
    const Tensor src = t->is_contiguous() ? *t : t->clone();
    Tensor d;
    try {
      d = be.alloc(src.shape(), src.dtype());
    } catch (const Error& e) {
      throw Error(str_cat(what, ": cannot place ", shape_str(src.shape()), " on the ", be.name(), " backend: ",
                          e.what()));
    }
    copies.push_back({.src = src, .dst = d});
    *t = d;
  }
  be.copy_many(copies);
}

Tensor to_host(Backend& be, const Tensor& t) {
  if (!t.defined() || (t.device() == Device::CPU && t.is_contiguous())) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  be.copy({.src = t, .dst = h});
  return h;
}

}  // namespace magi2
