// The op table of tests/cuda/test_cuda_backend_ops.cpp (issue 9 item 6, in the
// spirit of llama.cpp's test-backend-ops): every DiT op of src/ops/ops.h that
// the CUDA backend implements, with 1-3 shapes each and the tolerance its
// parity test in tests/cuda/ states (measured on the H200). An entry builds
// seeded random inputs on a given backend (the same bytes on every backend for
// one seed), enqueues the op, and names its outputs; the test runs it on the
// CPU and on CUDA and compares, the benchmark times it on CUDA.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace magi2::test {

/// How an entry's outputs must agree with the CPU backend's.
enum class TolKind : uint8_t {
  Exact,   ///< bit-exact, except at most `allowed` elements over all outputs
  Ulp,     ///< every element within `ulp` ulps of the output dtype (bf16 or f32; I32 outputs bit-exact),
           ///< the ulp taken at max(|ref|, rms(ref)/64) so that sums cancelling to ~0 are judged absolutely
  RelRms,  ///< rel-RMS <= rel_rms and max-abs <= max_abs (times max|ref| when `of_ref_max`), per output
};

/// A tolerance as stated by the op's parity test.
struct Tolerance {
  TolKind kind = TolKind::Exact;
  int64_t allowed = 0;
  double ulp = 0;
  double rel_rms = 0;
  double max_abs = 0;
  bool of_ref_max = false;
};

/// Bit-exact (at most `allowed` differing elements).
inline Tolerance exact(int64_t allowed = 0) { return {.kind = TolKind::Exact, .allowed = allowed}; }
/// Within `n` ulps of the output dtype (see TolKind::Ulp).
inline Tolerance ulps(double n) { return {.kind = TolKind::Ulp, .ulp = n}; }
/// rel-RMS <= rel and max-abs <= abs (abs * max|ref| when of_ref_max).
inline Tolerance rel_rms(double rel, double abs, bool of_ref_max = false) {
  return {.kind = TolKind::RelRms, .rel_rms = rel, .max_abs = abs, .of_ref_max = of_ref_max};
}

/// One entry built on one backend: the op with its inputs bound, its outputs.
struct OpCase {
  std::function<void()> run;    ///< enqueues the op once (re-runnable: in-place ops keep their cost)
  std::vector<Tensor> outputs;  ///< on the backend's device, poisoned (NaN bits) until run
  double bytes = 0;             ///< operand bytes read + written by one run (for GB/s)
};

/// A row of the table.
struct OpEntry {
  std::string op;     ///< the Backend method
  std::string shape;  ///< human-readable shape and variant
  Tolerance tol;
  double flops = 0;   ///< > 0: a compute-bound op, timed as TFLOP/s (else GB/s)
  std::function<OpCase(Backend&, uint64_t seed)> make;
};

/// Builds an OpCase on `be`: seeded host data, uploads, poisoned outputs, byte count.
class CaseBuilder {
 public:
  CaseBuilder(Backend& be, uint64_t seed) : be_(be), state_(seed * 0x9e3779b97f4a7c15ull + 1) {}

  /// Host tensor of uniform values in [lo, hi) rounded to dt (F32 or BF16); splitmix64.
  Tensor uniform(const Shape& shape, DType dt, float lo, float hi);
  /// The next raw random number (index vectors, permutations).
  uint64_t next();
  /// Host data -> an input on the backend (bytes += its size).
  Tensor in(const Tensor& host);
  /// An i32 index vector -> an input on the backend.
  Tensor in_i32(const std::vector<int32_t>& v);
  /// A poisoned output [shape] on the backend (bytes += its size).
  Tensor out(const Shape& shape, DType dt);
  /// Columns [begin, end) of a poisoned [rows, width] output (a row-strided view).
  Tensor out_cols(int64_t rows, int64_t width, DType dt, int64_t begin, int64_t end);
  /// Host data -> an in/out operand on the backend (read and written: bytes += 2x its size).
  Tensor inout(const Tensor& host);

  Backend& backend() { return be_; }
  OpCase done(std::function<void()> run) {
    c_.run = std::move(run);
    return std::move(c_);
  }

 private:
  Backend& be_;
  uint64_t state_;
  OpCase c_;
};

// Helpers of the entry files (ops_table*.cpp), defined in ops_table.cpp.

/// The dimensions joined with "x" (the shape column: "2048x3072").
std::string dims(std::initializer_list<int64_t> d);
/// Three row groups (one per modality) ending at rows a, b and rows.
Groups three_groups(int64_t a, int64_t b, int64_t rows);
/// A permutation of [0, n) (Fisher-Yates on the builder's stream).
std::vector<int32_t> permutation(CaseBuilder& b, int64_t n);

/// The table (built once; inputs are made per backend by OpEntry::make).
std::vector<OpEntry> backend_op_table();

/// The attention ops' entries (ops_table_attention.cpp), part of the table.
std::vector<OpEntry> attention_op_entries();

/// The mHC and MoE ops' entries (ops_table_mhc_moe.cpp), part of the table.
std::vector<OpEntry> mhc_moe_op_entries();

/// The Qwen3.5 text encoder's entries (ops_table_text.cpp), part of the table.
std::vector<OpEntry> text_encoder_op_entries();

/// The codec ops' entries (ops_table_codec.cpp), part of the table.
std::vector<OpEntry> codec_op_entries();

}  // namespace magi2::test
