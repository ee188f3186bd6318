int lumos_nt = 0;
void lumos_set_threads(int n) {
  lumos_nt = n;
#ifdef LUMOS_BLAS
  scipy_openblas_set_num_threads(1); /* the kernels split products themselves: lumos_sgemm */
#endif
}
#include <time.h>
static inline int64_t lumos_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
/* > 0: lumos_run returns between kernels once it has run this long (a search timing a
   candidate that cannot win any more; its outputs are then unfinished) */
int64_t lumos_budget_ns = 0;
