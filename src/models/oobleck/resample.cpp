#include "models/oobleck/resample.h"

#include <fftw3.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "core/error.h"

namespace magi2 {

namespace {

// FFTW's planner is not thread-safe; executing a plan is.
std::mutex& planner_mutex() {
  static std::mutex m;
  return m;
}

struct FftwFree {
  void operator()(void* p) const { fftw_free(p); }
};
struct PlanFree {
  void operator()(fftw_plan_s* p) const {
    std::lock_guard<std::mutex> lock(planner_mutex());
    fftw_destroy_plan(p);
  }
};
using Plan = std::unique_ptr<fftw_plan_s, PlanFree>;

}  // namespace

Tensor fourier_resample(const Tensor& x, int64_t m) {
  MAGI2_CHECK(x.defined() && x.device() == Device::CPU && x.dtype() == DType::F32 && x.dim() == 2 &&
                  x.is_contiguous(),
              "fourier_resample: expected a contiguous f32 [N, C] CPU tensor, got ", shape_str(x.shape()));
  const int64_t n = x.size(0), ch = x.size(1);
  MAGI2_CHECK(n >= 1 && m >= 1 && ch >= 1, "fourier_resample: cannot resample ", n, " samples to ", m);
  MAGI2_CHECK(n <= INT32_MAX && m <= INT32_MAX, "fourier_resample: ", n, " samples is too long");
  const int64_t nb_in = n / 2 + 1, nb_out = m / 2 + 1;
  std::unique_ptr<double, FftwFree> in(fftw_alloc_real(n)), out(fftw_alloc_real(m));
  std::unique_ptr<fftw_complex, FftwFree> spec_in(fftw_alloc_complex(nb_in)), spec_out(fftw_alloc_complex(nb_out));
  MAGI2_CHECK(in && out && spec_in && spec_out, "fourier_resample: out of memory for ", n, " samples");
  Plan fwd, inv;
  {
    std::lock_guard<std::mutex> lock(planner_mutex());
    fwd.reset(fftw_plan_dft_r2c_1d(static_cast<int>(n), in.get(), spec_in.get(), FFTW_ESTIMATE));
    inv.reset(fftw_plan_dft_c2r_1d(static_cast<int>(m), spec_out.get(), out.get(), FFTW_ESTIMATE));
  }
  MAGI2_CHECK(fwd && inv, "fourier_resample: FFTW could not plan sizes ", n, " and ", m);

  const int64_t keep = std::min(n, m);
  const int64_t nyq = keep / 2 + 1;  // bins copied, the Nyquist bin of `keep` included
  const float scale = static_cast<float>(static_cast<double>(m) / static_cast<double>(n));
  Tensor y = Tensor::empty({m, ch}, DType::F32);
  const float* px = x.data_as<float>();
  float* py = y.data_as<float>();
  for (int64_t c = 0; c < ch; ++c) {
    for (int64_t i = 0; i < n; ++i) in.get()[i] = px[i * ch + c];
    fftw_execute(fwd.get());
    fftw_complex* Y = spec_out.get();
    for (int64_t k = 0; k < nb_out; ++k) Y[k][0] = Y[k][1] = 0.0;
    for (int64_t k = 0; k < nyq; ++k) {
      Y[k][0] = spec_in.get()[k][0];
      Y[k][1] = spec_in.get()[k][1];
    }
    // The bin at keep/2 stands for both +-keep/2 frequencies of the longer signal.
    if (keep % 2 == 0 && m != n) {
      const double f = m < n ? 2.0 : 0.5;
      Y[keep / 2][0] *= f;
      Y[keep / 2][1] *= f;
    }
    Y[0][1] = 0.0;  // a real inverse ignores these imaginary parts; FFTW wants them zero
    if (m % 2 == 0) Y[m / 2][1] = 0.0;
    fftw_execute(inv.get());
    const double inv_m = 1.0 / static_cast<double>(m);
    for (int64_t i = 0; i < m; ++i) py[i * ch + c] = static_cast<float>(out.get()[i] * inv_m) * scale;
  }
  return y;
}

}  // namespace magi2
