#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LUMOS_WIDE __attribute__((target("prefer-vector-width=512")))
#else
#define LUMOS_WIDE
#endif
/* x86 instructions through GCC's builtins, not <immintrin.h>: parsing that header took
   0.13 s of the 0.15 s a kernel's translation unit costs to compile */
typedef char lumos_v16qi __attribute__((vector_size(16)));
typedef int lumos_v16si __attribute__((vector_size(64)));
typedef short lumos_v8hi __attribute__((vector_size(16)));
#if defined(__GNUC__) && !defined(__clang__)
#define LUMOS_X86_BUILTINS 1
#elif defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
/* 16 bytes to 16 int32s: GCC 12 converts a vector of bytes loaded from memory lane by lane */
#if defined(__AVX512F__) && defined(LUMOS_X86_BUILTINS)
#define LUMOS_WIDEN_UINT8_X16(x, T) ((T)__builtin_ia32_pmovzxbd512_mask( \
    (lumos_v16qi)(x), (lumos_v16si){0}, (unsigned short)-1))
#define LUMOS_WIDEN_INT8_X16(x, T) ((T)__builtin_ia32_pmovsxbd512_mask( \
    (lumos_v16qi)(x), (lumos_v16si){0}, (unsigned short)-1))
#elif defined(__AVX512F__)
#define LUMOS_WIDEN_UINT8_X16(x, T) ((T)_mm512_cvtepu8_epi32((__m128i)(x)))
#define LUMOS_WIDEN_INT8_X16(x, T) ((T)_mm512_cvtepi8_epi32((__m128i)(x)))
#else
#define LUMOS_WIDEN_UINT8_X16(x, T) __builtin_convertvector(x, T)
#define LUMOS_WIDEN_INT8_X16(x, T) __builtin_convertvector(x, T)
#endif
/* c + a*b for 16 floats, rounded once: a sum of products accumulates with FMA (FLAGS turn
   off contraction elsewhere: dequantization rounds as written) */
#if defined(__AVX512F__) && defined(LUMOS_X86_BUILTINS)
#define LUMOS_FMA_F32X16(a, b, c) ((__typeof__(c))__builtin_ia32_vfmaddps512_mask( \
    (a), (b), (c), (unsigned short)-1, 4))
#elif defined(__AVX512F__)
#define LUMOS_FMA_F32X16(a, b, c) ((__typeof__(c))_mm512_fmadd_ps((a), (b), (c)))
#else
#define LUMOS_FMA_F32X16(a, b, c) ((c) + (a) * (b))
#endif
/* ... and for 8 floats (an AVX2 register) */
#if defined(__FMA__) && defined(LUMOS_X86_BUILTINS)
#define LUMOS_FMA_F32X8(a, b, c) ((__typeof__(c))__builtin_ia32_vfmaddps256((a), (b), (c)))
#elif defined(__FMA__)
#define LUMOS_FMA_F32X8(a, b, c) ((__typeof__(c))_mm256_fmadd_ps((a), (b), (c)))
#else
#define LUMOS_FMA_F32X8(a, b, c) ((c) + (a) * (b))
#endif

/* 2^x for floats without branches, so a loop of it vectorizes whatever its inputs hold:
   glibc's vector exp2f computes the lanes out of its range (a mask's -inf, -200) one at a
   time, 9-24x slower (an attention's causal softmax). x = n + f, |f| <= 1/2; 2^f by its
   Taylor polynomial to degree 7; 2^n as two powers of two, so that a subnormal result
   rounds once. Within 0.9 ulp of 2^x (glibc's: 0.5); results that round to 0 are computed
   at x = 0 and replaced (an underflow costs a microcode assist on Intel, 7x). */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA) /* (without: within 1.2 ulp) */
#define LUMOS_MADD(a, b, c) __builtin_fmaf(a, b, c)
#else
#define LUMOS_MADD(a, b, c) ((a) * (b) + (c))
#endif
static inline float lumos_exp2f(float x) {
  const int zero = x < -151.0f;
  x = zero ? 0.0f : x > 129.0f ? 129.0f : x; /* (NaN stays) */
  const float t = x + 0x1.8p23f; /* x rounded to an integer n, in t's low bits */
  int32_t n;
  memcpy(&n, &t, 4);
  n -= 0x4B400000;
  const float f = x - (t - 0x1.8p23f);
  float p = 1.5252734e-5f;
  p = LUMOS_MADD(p, f, 1.5403530e-4f);
  p = LUMOS_MADD(p, f, 1.3333558e-3f);
  p = LUMOS_MADD(p, f, 9.6181291e-3f);
  p = LUMOS_MADD(p, f, 5.5504109e-2f);
  p = LUMOS_MADD(p, f, 2.4022651e-1f);
  p = LUMOS_MADD(p, f, 6.9314718e-1f);
  p = LUMOS_MADD(p, f, 1.0f);
  const uint32_t b1 = (uint32_t)((n >> 1) + 127) << 23, b2 = (uint32_t)(n - (n >> 1) + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, 4);
  memcpy(&s2, &b2, 4);
  return zero ? 0.0f : p * s1 * s2;
}

/* glibc's vector math (libmvec, within a few ulp): lets loops calling these vectorize */
#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 35)
#pragma omp declare simd notinbranch
float log2f(float);
#pragma omp declare simd notinbranch
float sinf(float);
#pragma omp declare simd notinbranch
double exp2(double);
#pragma omp declare simd notinbranch
double log2(double);
#pragma omp declare simd notinbranch
double sin(double);
#endif

/* zeros to read a block of an output loop from where a guard reads nothing (see read) */
static const int64_t lumos_zero_row[2048] __attribute__((aligned(64))); /* BLOCK */

#define LUMOS_TILES @TILES@
extern int lumos_nt; /* the thread count, set by the driver's lumos_set_threads */
static inline int lumos_threads(void) { return lumos_nt > 0 ? lumos_nt : omp_get_max_threads(); }
#ifdef LUMOS_BLAS
/* lumos' own single-threaded product (OWN_GEMM: a unit of its own, compiled once). These
   units' functions are weak here: a kernel compiled in one object with others (cc's
   batches) may be linked, for them, into a program that never calls it and so lacks
   its unit; the reference then resolves to nothing instead of failing the load */
#define LUMOS_UNIT __attribute__((weak))
LUMOS_UNIT void lumos_gemm_own(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                               int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc);
/* ... and its bf16x3 products on AMX tiles (AMX_GEMM: a unit of its own, compiled once):
   a whole product; a convolution's windows product (lumos_amx_windows, on A packed by
   lumos_amx_pack_a into `lumos_amx_a_size(m, k)` uint16s), where lumos_amx_ready() */
LUMOS_UNIT void lumos_gemm_amx(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                               int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc);
LUMOS_UNIT int lumos_amx_ready(void);
LUMOS_UNIT int64_t lumos_amx_a_size(int64_t m, int64_t k);
LUMOS_UNIT void lumos_amx_pack_a(int64_t m, int64_t k, const float *a, int64_t sam,
                                 int64_t sak, uint16_t *aq);
LUMOS_UNIT void lumos_amx_windows(int64_t m, int64_t k, const uint16_t *aq, const float *pd,
                                  const int64_t *koff, int64_t j0, int64_t j, int64_t w,
                                  int64_t pw, float *c, int64_t ldc);
/* ... and a 3x3 convolution's windows product by Winograd's F(2x2, 3x3) (WINOGRAD) */
LUMOS_UNIT void lumos_winograd(int64_t m, int64_t chans, int64_t batches, const float *a,
                               int64_t sam, int64_t sak, const int64_t *koff, const float *pd,
                               int64_t bs, int64_t hp, int64_t wp, int64_t h, int64_t w,
                               float *c, int64_t ldc, int64_t cstep, int phased);
static inline void lumos_cblas(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                               int64_t lda, const float *b, int64_t ldb, float *c,
                               int64_t ldc) {
  scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (blasint)m, (blasint)n, (blasint)k, 1.0f, a, (blasint)lda, b, (blasint)ldb,
                    0.0f, c, (blasint)ldc);
}
/* C = A B (row-major) on the OpenMP threads, each running OpenBLAS single-threaded (the
   driver sets it; lumos_sgemm) or lumos_gemm_own (lumos_sgemm_own): one pool of threads,
   so no thread spins waiting for the next kernel on a core that another pool's thread
   computes on. Rows are split when there are at least as many as columns, else columns,
   in steps of 16; small products run on the calling thread. */
#define LUMOS_SPLIT_GEMM(NAME, GEMM)                                                          \
static inline void NAME(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,     \
                        int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {   \
  const int nt = omp_in_parallel() || (double)m * n * k < 131072.0 ? 1 : lumos_threads();   \
  _Pragma("omp parallel num_threads(nt)")                                                     \
  {                                                                                           \
    const int64_t t = omp_get_thread_num(), nth = omp_get_num_threads();                     \
    int64_t r0 = 0, r1 = m, c0 = 0, c1 = n;                                                   \
    if (m >= n) {                                                                             \
      r0 = m * t / nth;                                                                       \
      r1 = m * (t + 1) / nth;                                                                 \
    } else {                                                                                  \
      c0 = n * t / nth & ~15;                                                                 \
      c1 = t == nth - 1 ? n : n * (t + 1) / nth & ~15;                                        \
    }                                                                                         \
    if (r1 > r0 && c1 > c0)                                                                   \
      GEMM(ta, tb, r1 - r0, c1 - c0, k, a + (ta ? r0 : r0 * lda), lda,                        \
           b + (tb ? c0 * ldb : c0), ldb, c + r0 * ldc + c0, ldc);                            \
  }                                                                                           \
}
LUMOS_SPLIT_GEMM(lumos_sgemm, lumos_cblas)
LUMOS_SPLIT_GEMM(lumos_sgemm_own, lumos_gemm_own)
LUMOS_SPLIT_GEMM(lumos_sgemm_amx, lumos_gemm_amx)
#include <stdlib.h>
/* a thread's scratch for the row blocks of products run by the kernels reading them
   (kernels.Tile), one per product of a kernel, and one more (LUMOS_TILES: a windows
   product's A as AMX tiles): grown as needed, kept for the next call */
static __thread float *lumos_tile_p[LUMOS_TILES + 1];
static __thread int64_t lumos_tile_n[LUMOS_TILES + 1];
static inline float *lumos_tile(int j, int64_t n) {
  if (n > lumos_tile_n[j]) {
    free(lumos_tile_p[j]);
    lumos_tile_p[j] = (float *)malloc((size_t)n * sizeof(float));
    if (!lumos_tile_p[j]) abort(); /* (a few hundred KiB a thread; the whole product at most) */
    lumos_tile_n[j] = n;
  }
  return lumos_tile_p[j];
}
typedef float lumos_f32x16 __attribute__((vector_size(64)));
typedef float lumos_f32x16u __attribute__((vector_size(64), aligned(4)));
/* 16 copies of one float: a broadcast from memory (`(lumos_f32x16){0} + x` adds first, to
   keep -0.0 apart from 0.0, then broadcasts from a register on the port the FMAs need) */
#define LUMOS_SPLAT_F32X16(x) __extension__({ const float x_ = (x); \
  (lumos_f32x16){x_, x_, x_, x_, x_, x_, x_, x_, x_, x_, x_, x_, x_, x_, x_, x_}; })
/* the first n (1..16) of 16 floats stored */
#if defined(__AVX512F__) && defined(LUMOS_X86_BUILTINS)
#define LUMOS_STORE_F32X16_FIRST(p, v, n) \
  __builtin_ia32_storeups512_mask((p), (v), (unsigned short)((1u << (n)) - 1))
#elif defined(__AVX512F__)
#define LUMOS_STORE_F32X16_FIRST(p, v, n) \
  _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1), (__m512)(v))
#else
#define LUMOS_STORE_F32X16_FIRST(p, v, n) \
  do { for (int64_t j_ = 0; j_ < (n); j_++) (p)[j_] = (v)[j_]; } while (0)
#endif
#if defined(__AVX512F__)
#define LUMOS_PANELS 1
/* C = A B for a block that a product packed itself (kernels.Pack.panels; B: k x n,
   row-major, ldb), single-threaded: 8 rows of C by 48 columns at a time in 24 vector
   registers, those 8 rows of A first copied into scratch 1 as k columns of 8; B is read
   where it lies (OpenBLAS copies it into its own layout first: a cost that a short k does
   not repay). A(i, p) is a[i * sam + p * sak]. */
static void lumos_gemm_panels(int64_t m, int64_t n, int64_t k, const float *a, int64_t sam,
                              int64_t sak, const float *b, int64_t ldb, float *c,
                              int64_t ldc) {
  float *restrict ap = lumos_tile(1, 8 * k + 48 * k), *restrict edge = ap + 8 * k;
  for (int64_t i0 = 0; i0 < m; i0 += 8) {
    const int64_t mr = m - i0 < 8 ? m - i0 : 8;
    for (int64_t p = 0; p < k; p++)
      for (int64_t i = 0; i < 8; i++) ap[p * 8 + i] = i < mr ? a[(i0 + i) * sam + p * sak] : 0.0f;
    for (int64_t j0 = 0; j0 < n; j0 += 48) {
      const int64_t nr = n - j0 < 48 ? n - j0 : 48;
      const float *bp = b + j0;
      int64_t lb = ldb;
      if (nr < 48) { /* the last columns, zero-padded to 48 */
        for (int64_t p = 0; p < k; p++)
          for (int64_t j = 0; j < 48; j++) edge[p * 48 + j] = j < nr ? b[p * ldb + j0 + j] : 0.0f;
        bp = edge;
        lb = 48;
      }
      lumos_f32x16 acc[8][3];
      for (int i = 0; i < 8; i++)
        for (int j = 0; j < 3; j++) acc[i][j] = (lumos_f32x16){0};
      for (int64_t p = 0; p < k; p++) {
        const lumos_f32x16 b0 = *(const lumos_f32x16u *)(bp + p * lb),
                           b1 = *(const lumos_f32x16u *)(bp + p * lb + 16),
                           b2 = *(const lumos_f32x16u *)(bp + p * lb + 32);
        for (int i = 0; i < 8; i++) {
          const lumos_f32x16 x = LUMOS_SPLAT_F32X16(ap[p * 8 + i]);
          acc[i][0] = LUMOS_FMA_F32X16(x, b0, acc[i][0]);
          acc[i][1] = LUMOS_FMA_F32X16(x, b1, acc[i][1]);
          acc[i][2] = LUMOS_FMA_F32X16(x, b2, acc[i][2]);
        }
      }
      float *ct = c + i0 * ldc + j0;
      if (mr == 8 && nr == 48) {
        for (int i = 0; i < 8; i++)
          for (int j = 0; j < 3; j++) *(lumos_f32x16u *)(ct + i * ldc + 16 * j) = acc[i][j];
      } else {
        for (int i = 0; i < mr; i++)
          for (int64_t j = 0; j < nr; j++) ct[i * ldc + j] = acc[i][j / 16][j % 16];
      }
    }
  }
}
#endif
/* One panel of C = A B where B is a convolution's windows (kernels.Windows): B's row p is
   `pd + koff[p]` along B's padded columns (an input padded copy, each row `pw` wide, of
   which C keeps the first `w`). The 48 padded columns from j0 (of j) by all m rows, 8 at a
   time in 24 vector registers, A packed as strips of k columns of 8 rows (`ap`); each
   tile's rows then stored to C in runs that skip the padding. */
/* rows [i0, i0 + mr) of a windows panel (t: `ldt` floats a row, its nr padded columns
   from j0, images `pw` padded columns wide) to c, the padded columns (from w on) dropped */
static inline void lumos_windows_out(const float *t, int64_t ldt, int64_t i0, int64_t mr,
                                     int64_t j0, int64_t nr, int64_t w, int64_t pw, float *c,
                                     int64_t ldc) {
  for (int64_t l = 0; l < nr;) {
    const int64_t row = (j0 + l) / pw, col = (j0 + l) % pw;
    const int64_t run = pw - col < nr - l ? pw - col : nr - l;
    const int64_t keep = w - col < run ? w - col : run;
    for (int64_t i = 0; i < mr && keep > 0; i++)
      memcpy(c + (i0 + i) * ldc + row * w + col, t + i * ldt + l, (size_t)keep * sizeof(float));
    l += run;
  }
}
static void lumos_gemm_windows(int64_t m, int64_t k, const float *ap, const float *pd,
                               const int64_t *koff, int64_t j0, int64_t j, int64_t w,
                               int64_t pw, float *c, int64_t ldc) {
  const int64_t nr = j - j0 < 48 ? j - j0 : 48;
  const float *bp = pd + j0;
  for (int64_t i0 = 0; i0 < m; i0 += 8) {
    const int64_t mr = m - i0 < 8 ? m - i0 : 8;
    const float *a = ap + i0 * k;
    lumos_f32x16 acc[8][3];
    /* the next panel's rows of C into L2 (written after its k steps: a store to a line not
       cached waits for it; 12% of a 112x112 32->64 convolution) */
    for (int64_t l = 48; l < 96 && j0 + l < j && w < pw; l += 15) {
      const int64_t row = (j0 + l) / pw, col = (j0 + l) % pw;
      for (int64_t i = 0; i < mr && col < w; i++)
        __builtin_prefetch(c + (i0 + i) * ldc + row * w + col, 1, 2);
    }
    for (int i = 0; i < 8; i++)
      for (int q = 0; q < 3; q++) acc[i][q] = (lumos_f32x16){0};
    for (int64_t p = 0; p < k; p++) {
      const float *b = bp + koff[p];
      const lumos_f32x16 b0 = *(const lumos_f32x16u *)b, b1 = *(const lumos_f32x16u *)(b + 16),
                         b2 = *(const lumos_f32x16u *)(b + 32);
      for (int i = 0; i < 8; i++) {
        const lumos_f32x16 x = LUMOS_SPLAT_F32X16(a[p * 8 + i]);
        acc[i][0] = LUMOS_FMA_F32X16(x, b0, acc[i][0]);
        acc[i][1] = LUMOS_FMA_F32X16(x, b1, acc[i][1]);
        acc[i][2] = LUMOS_FMA_F32X16(x, b2, acc[i][2]);
      }
    }
    if (w == pw) { /* the padded columns kept (a band's scratch): C's rows as computed */
      for (int64_t i = 0; i < mr; i++)
        for (int q = 0; q < 3 && 16 * q < nr; q++)
          LUMOS_STORE_F32X16_FIRST(c + (i0 + i) * ldc + j0 + 16 * q, acc[i][q],
                                   nr - 16 * q < 16 ? nr - 16 * q : 16);
      continue;
    }
    float t[8][48];
    for (int i = 0; i < 8; i++)
      for (int q = 0; q < 3; q++) *(lumos_f32x16u *)(t[i] + 16 * q) = acc[i][q];
    lumos_windows_out(t[0], 48, i0, mr, j0, nr, w, pw, c, ldc);
  }
}
#endif

static inline int64_t lumos_fdiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return q - ((a % b != 0) & ((a < 0) != (b < 0)));
}
static inline int64_t lumos_fmod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return r + ((r != 0) & ((r < 0) != (b < 0))) * b;
}
static inline int64_t lumos_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t lumos_max(int64_t a, int64_t b) { return a > b ? a : b; }
#define LUMOS_FDIV(a, b) lumos_fdiv((a), (b))
#define LUMOS_FMOD(a, b) lumos_fmod((a), (b))
#define LUMOS_MIN(a, b) lumos_min((a), (b))
#define LUMOS_MAX(a, b) lumos_max((a), (b))

static inline float lumos_bf16_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t lumos_f32_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (f != f) return 0x7FC0;
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
/* f16 is stored as its bit pattern too: GCC 12 vectorizes no loop touching _Float16 on
   CPUs without AVX512-FP16; these integer conversions vectorize */
static inline float lumos_f16_f32(uint16_t h) {
  /* branch-free, so that a loop of them vectorizes (with branches an f16 matrix-vector
     product ran at 2 G weights/s): exponent and mantissa shifted into place, the exponent
     rebiased by 112 (exact); a subnormal half as 2^-14 (1 + mantissa / 1024)
     less 2^-14 (exact, and no subnormal float on the way, which
     CompileOptions.flush_denormals would read as zero; the integer mantissa converted
     instead kept Whisper's f16 loops from vectorizing: decode 110 -> 37 tokens/s);
     inf/NaN given the all-ones exponent, then the sign */
  const uint32_t m = (uint32_t)(h & 0x7FFFu) << 13;
  uint32_t u = m + (112u << 23), v = m + (113u << 23);
  float f, g;
  memcpy(&f, &u, 4);
  memcpy(&g, &v, 4);
  g -= 0x1p-14f;
  f = m < (0x400u << 13) ? g : f;
  memcpy(&u, &f, 4);
  u |= (h & 0x7C00u) == 0x7C00u ? 0x7F800000u : 0u;
  u |= (uint32_t)(h & 0x8000u) << 16;
  memcpy(&f, &u, 4);
  return f;
}
/* one value outside a vector loop: the F16C instruction where the CPU has it */
static inline float lumos_f16_f32_one(uint16_t h) {
#if defined(__F16C__) && defined(LUMOS_X86_BUILTINS)
  return __builtin_ia32_vcvtph2ps((lumos_v8hi){(short)h, 0, 0, 0, 0, 0, 0, 0})[0];
#elif defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return lumos_f16_f32(h);
#endif
}
static inline uint16_t lumos_f64_f16(double x) { /* round to nearest even, once */
  uint64_t u;
  memcpy(&u, &x, 8);
  uint16_t s = (uint16_t)((u >> 48) & 0x8000u);
  uint64_t a = u & 0x7FFFFFFFFFFFFFFFull;
  if (a > 0x7FF0000000000000ull) return (uint16_t)(s | 0x7E00u | ((a >> 42) & 0x3FFu));
  if (a >= 0x40EFFE0000000000ull) return (uint16_t)(s | 0x7C00u); /* >= 65520: inf */
  if (a >= 0x3F10000000000000ull) /* normal: rebias the exponent, round the mantissa */
    return (uint16_t)(s | ((a - 0x3F00000000000000ull + 0x1FFFFFFFFFFull
                            + ((a >> 42) & 1u)) >> 42));
  double v;
  memcpy(&v, &a, 8);
  return (uint16_t)(s | (uint16_t)((v * 0x1p24 + 0x1p52) - 0x1p52)); /* subnormal units */
}
