#include "models/magi2_dit/adapters.h"

namespace magi2 {

void pre_adapter(Backend& be, const PreAdapterParams& p) {
  for (int m = 0; m < 3; ++m) {
    const int64_t r0 = p.groups3.cu[m], r1 = p.groups3.cu[m + 1];
    if (r0 == r1) continue;
    be.linear({.x = p.x_p.slice_rows(r0, r1).slice_cols(0, p.chans[m]),
               .w = *p.w[m],
               .bias = *p.b[m],
               .y = p.y.slice_rows(r0, r1),
               .groups = Groups::single(r1 - r0)});
  }
}

void post_adapter(Backend& be, const PostAdapterParams& p) {
  be.zero(p.out_p);
  for (int m = 0; m < 2; ++m) {
    const int64_t r0 = p.groups3.cu[m], r1 = p.groups3.cu[m + 1];
    if (r0 == r1) continue;
    const Groups g = Groups::single(r1 - r0);
    be.rms_norm({.x = p.state.slice_rows(r0, r1), .w = *p.norm[m], .y = p.fin.slice_rows(r0, r1), .groups = g});
    be.linear({.x = p.fin.slice_rows(r0, r1),
               .w = *p.linear[m],
               .y = p.out_p.slice_rows(r0, r1).slice_cols(0, p.chans[m]),
               .groups = g});
  }
  be.gather_rows({.src = p.out_p, .dst = p.out, .index = p.inv});
}

}  // namespace magi2
