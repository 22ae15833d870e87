#include "ops/ops.h"
namespace magi2 {
std::unique_ptr<Backend> make_cpu_backend(int) { throw Error("cpu backend: not implemented yet"); }
}
