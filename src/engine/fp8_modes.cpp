#include "engine/fp8_modes.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/magi2_dit/weights.h"
#include "ops/numerics.h"

namespace magi2 {

std::string Fp8Modes::text() const {
  return str_cat("experts ", fp8_experts ? str_cat("fp8 ", fp8_compute) : std::string("bf16"), ", attention ",
                 attention_compute, ", linears ", linear_compute);
}

nlohmann::json Fp8Modes::json() const {
  return {{"weights", fp8_experts ? "fp8-experts" : "bf16"},
          {"fp8_compute", fp8_experts ? fp8_compute : "none"},
          {"attention_compute", attention_compute},
          {"linear_compute", linear_compute}};
}

Fp8Modes fp8_modes(const EngineOptions& options, bool fp8_experts) {
  return {fp8_experts, options.fp8_compute, options.attention_compute, options.linear_compute};
}

std::vector<std::string> fp8_backend_problems(const DitArch& arch, const Fp8Modes& modes, const std::string& backend) {
  std::vector<std::string> problems;
  if (backend != "cuda") return problems;
  if (fp8_from_compute_name(modes.linear_compute, "--linear-compute")) {
    const std::vector<DitLinearShape> all = dit_fp8_linear_shapes(arch);
    const DitLinearShape* first = nullptr;
    size_t bad = 0;
    for (const DitLinearShape& l : all)
      if (l.in % kFp8Block != 0 || l.out % kFp8Block != 0) bad += 1, first = first ? first : &l;
    if (bad > 0)
      problems.push_back(str_cat("--linear-compute fp8 on CUDA needs the dense linears' in and out widths to be "
                                 "multiples of ", kFp8Block, ", but ",
                                 bad == all.size() ? str_cat("none of this model's ", bad, " is")
                                                   : str_cat(bad, " of this model's ", all.size(), " are not"),
                                 " (layer ", first->layer, " ", first->name, ": ", first->in, " -> ",
                                 first->out, "); use --device cpu (any width) or --linear-compute bf16"));
  }
  if (fp8_from_compute_name(modes.attention_compute, "--attention-compute") && arch.head_dim != 128)
    problems.push_back(str_cat("--attention-compute fp8 on CUDA needs head dim 128, but this model's is ",
                               arch.head_dim, "; use --device cpu (any head dim) or --attention-compute bf16"));
  return problems;
}

}  // namespace magi2
