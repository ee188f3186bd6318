/* C = A B (row-major, as cblas_sgemm with alpha 1 and beta 0), single-threaded, in
   PyTorch's "high" float32 matmul precision (kernels.Kernels.amx): each factor split into
   two bfloat16s, x = hi + lo (each rounded to nearest: |x - hi - lo| <= 2^-17 |x|), and
   A B = Ahi Bhi + Alo Bhi + Ahi Blo (the Alo Blo term, ~2^-16 of it, dropped) summed in
   float on AMX tiles: a relative error of ~4e-6 of the products' magnitude, against
   float's ~4e-7. A is packed into scratch as 16-row tiles of 32 k (hi, then lo), B as
   pairs of 16-column tiles of 32 k in the tiles' pairs-of-rows layout (hi, then lo); each
   step multiplies 2 x 2 tiles of C (32 x 32 floats) by 32 k, three products. Without AMX
   (a compiler or kernel that lacks it) it is OpenBLAS' float product. */
#include <stdlib.h>
#include <string.h>
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && \
    defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
static int lumos_amx_ok;
/* Linux hands out the tiles' 8 KiB of state only to a process that asks
   (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); every thread then has it */
__attribute__((constructor)) static void lumos_amx_init(void) {
  lumos_amx_ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}
typedef struct {
  uint8_t palette, start, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} lumos_tilecfg;
/* 16 floats as bf16 hi and lo (an infinite x: lo 0, not inf - inf) */
static inline void lumos_split16(__m512 x, uint16_t *hi, uint16_t *lo) {
  const __m256i xh = (__m256i)_mm512_cvtneps_pbh(x);
  const __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(xh), 16));
  const __m512 rest = _mm512_maskz_sub_ps(~_mm512_fpclass_ps_mask(back, 0x18), x, back);
  _mm256_storeu_si256((__m256i *)hi, xh);
  _mm256_storeu_si256((__m256i *)lo, (__m256i)_mm512_cvtneps_pbh(rest));
}
/* 32 floats (from p, or gathered `step` apart, zero past `n`) as bf16 hi and lo */
static inline void lumos_split32(const float *p, int64_t step, int64_t n, uint16_t *hi,
                                 uint16_t *lo) {
  if (step == 1 && n >= 32) {
    lumos_split16(_mm512_loadu_ps(p), hi, lo);
    lumos_split16(_mm512_loadu_ps(p + 16), hi + 16, lo + 16);
    return;
  }
  float t[32] __attribute__((aligned(64)));
  for (int64_t e = 0; e < 32; e++) t[e] = e < n ? p[e * step] : 0.0f;
  lumos_split16(_mm512_load_ps(t), hi, lo);
  lumos_split16(_mm512_load_ps(t + 16), hi + 16, lo + 16);
}
/* 16 columns of two k rows, bf16, as the tiles' 16 words of pairs (one 64-byte row) */
static inline void lumos_pairs16(const uint16_t *even, const uint16_t *odd, uint16_t *dst) {
  const __m512i e = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)even));
  const __m512i o = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)odd));
  _mm512_store_si512(dst, _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
}
/* C tiles 0-3 += A tiles 4, 5 (rows) by B tiles 6, 7 (columns); C tiles 0-2 += A tile
   A by B tiles 5-7 */
#define LUMOS_AMX_2X2()                                                                    \
  do {                                                                                     \
    _tile_dpbf16ps(0, 4, 6);                                                               \
    _tile_dpbf16ps(1, 4, 7);                                                               \
    _tile_dpbf16ps(2, 5, 6);                                                               \
    _tile_dpbf16ps(3, 5, 7);                                                               \
  } while (0)
#define LUMOS_AMX_1X3(A)                                                                   \
  do {                                                                                     \
    _tile_dpbf16ps(0, A, 5);                                                               \
    _tile_dpbf16ps(1, A, 6);                                                               \
    _tile_dpbf16ps(2, A, 7);                                                               \
  } while (0)
/* every tile 16 rows of 64 bytes */
static inline void lumos_amx_config(void) {
  lumos_tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}
static __thread uint16_t *lumos_amx_p[2];
static __thread int64_t lumos_amx_n[2];
static uint16_t *lumos_amx_scratch(int j, int64_t n) {
  if (n > lumos_amx_n[j]) {
    free(lumos_amx_p[j]);
    lumos_amx_p[j] = (uint16_t *)aligned_alloc(64, (size_t)n * 2);
    if (!lumos_amx_p[j]) abort();
    lumos_amx_n[j] = n;
  }
  return lumos_amx_p[j];
}
/* C tile T to rows I0.., columns J0.. of c (a partial one through `part`) */
#define LUMOS_AMX_STORE(T, I0, J0)                                                         \
  if ((I0) < m && (J0) < n) {                                                              \
    if ((I0) + 16 <= m && (J0) + 16 <= n)                                                  \
      _tile_stored(T, c + (I0) * ldc + (J0), ldc * 4);                                     \
    else {                                                                                 \
      _tile_stored(T, part, 64);                                                           \
      for (int64_t r = 0; r < 16 && (I0) + r < m; r++)                                     \
        for (int64_t j = 0; j < 16 && (J0) + j < n; j++)                                   \
          c[((I0) + r) * ldc + (J0) + j] = part[r * 16 + j];                               \
    }                                                                                      \
  }
void lumos_gemm_amx(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  if (!lumos_amx_ok) {
    lumos_cblas(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
    return;
  }
  const int64_t kb = (k + 31) / 32, np = (n + 31) / 32;
  /* B: per panel of 32 columns, per 32 k: 2 tiles hi, 2 tiles lo; each tile's row p holds
     k rows 2p and 2p + 1 of its 16 columns, interleaved */
  uint16_t *bp = lumos_amx_scratch(1, np * kb * 2048);
  for (int64_t jp = 0; jp < np; jp++)
    for (int64_t q = 0; q < kb; q++) {
      uint16_t *h = bp + (jp * kb + q) * 2048; /* its first tile; the second 512 on */
      const int64_t j0 = jp * 32, kk = q * 32;
      const int64_t w = n - j0 < 32 ? n - j0 : 32, d = k - kk < 32 ? k - kk : 32;
      if (tb) /* column j's 32 k lie together: split, then each pair of k to row p */
        for (int64_t j = 0; j < 32; j++) {
          uint32_t hi[16] __attribute__((aligned(64))), lo[16] __attribute__((aligned(64)));
          lumos_split32(b + (j0 + j) * ldb + kk, 1, j < w ? d : 0, (uint16_t *)hi,
                        (uint16_t *)lo);
          uint16_t *t = h + j / 16 * 512 + j % 16 * 2;
          for (int64_t p = 0; p < 16; p++) {
            memcpy(t + p * 32, hi + p, 4);
            memcpy(t + 1024 + p * 32, lo + p, 4);
          }
        }
      else /* k rows 2p and 2p + 1 of the 32 columns: split, then interleaved */
        for (int64_t p = 0; p < 16; p++) {
          uint16_t h2[2][32] __attribute__((aligned(64))), l2[2][32] __attribute__((aligned(64)));
          for (int e = 0; e < 2; e++)
            lumos_split32(b + (kk + 2 * p + e) * ldb + j0, 1, 2 * p + e < d ? w : 0, h2[e],
                          l2[e]);
          for (int half = 0; half < 2; half++) {
            lumos_pairs16(h2[0] + 16 * half, h2[1] + 16 * half, h + half * 512 + p * 32);
            lumos_pairs16(l2[0] + 16 * half, l2[1] + 16 * half, h + 1024 + half * 512 + p * 32);
          }
        }
    }
  lumos_amx_config();
  float part[256] __attribute__((aligned(64)));
  /* A in blocks of rows (512 KiB packed, 128 rows at least: in L2), each multiplied by
     every panel of B, which is read again from L3 for each block (harness, 2 threads,
     4096 x 384 x 1536: blocks of 64 rows 8.3 ms, of 128 7.3) */
  const int64_t rb = LUMOS_MAX(128, (131072 / LUMOS_MAX(kb * 32, 1)) & ~31);
  uint16_t *ap = lumos_amx_scratch(0, rb / 16 * kb * 1024);
  for (int64_t r0 = 0; r0 < m; r0 += rb) {
    const int64_t rows = m - r0 < rb ? m - r0 : rb, mt = (rows + 15) / 16;
    lumos_amx_pack_a(rows, k, ta ? a + r0 : a + r0 * lda, ta ? 1 : lda, ta ? lda : 1, ap);
    if (mt % 2) /* an odd last tile's partner: zeros */
      memset(ap + mt * kb * 1024, 0, (size_t)kb * 1024 * sizeof(uint16_t));
    for (int64_t jp = 0; jp < np; jp++)
      for (int64_t it = 0; it < mt; it += 2) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        const uint16_t *a0 = ap + it * kb * 1024, *a1 = a0 + kb * 1024, *bq = bp + jp * kb * 2048;
        /* the block's last rows: fetch the next panel into L2 (harness, 4096 x 1536 x 384:
           7.8 -> 6.8-7.2 ms) */
        const int last = it + 2 >= mt && jp + 1 < np;
        for (int64_t q = 0; q < kb; q++) {
          const uint16_t *x0 = a0 + q * 1024, *x1 = a1 + q * 1024, *y = bq + q * 2048;
          if (last)
            for (int l = 0; l < 2048; l += 32)
              _mm_prefetch((const char *)(y + kb * 2048 + l), _MM_HINT_T1);
          _tile_loadd(4, x0, 64); /* Ahi Bhi */
          _tile_loadd(5, x1, 64);
          _tile_loadd(6, y, 64);
          _tile_loadd(7, y + 512, 64);
          LUMOS_AMX_2X2();
          _tile_loadd(4, x0 + 512, 64); /* Alo Bhi */
          _tile_loadd(5, x1 + 512, 64);
          LUMOS_AMX_2X2();
          _tile_loadd(4, x0, 64); /* Ahi Blo */
          _tile_loadd(5, x1, 64);
          _tile_loadd(6, y + 1024, 64);
          _tile_loadd(7, y + 1536, 64);
          LUMOS_AMX_2X2();
        }
        const int64_t i0 = r0 + it * 16, j0 = jp * 32;
        LUMOS_AMX_STORE(0, i0, j0)
        LUMOS_AMX_STORE(1, i0, j0 + 16)
        LUMOS_AMX_STORE(2, i0 + 16, j0)
        LUMOS_AMX_STORE(3, i0 + 16, j0 + 16)
      }
  }
  _tile_release();
}
int lumos_amx_ready(void) { return lumos_amx_ok; }
int64_t lumos_amx_a_size(int64_t m, int64_t k) { return (m + 15) / 16 * ((k + 31) / 32) * 1024; }
/* A (m x k, element (i, p) at a[i * sam + p * sak]) as 16-row tiles of 32 k, hi then lo */
void lumos_amx_pack_a(int64_t m, int64_t k, const float *a, int64_t sam, int64_t sak,
                      uint16_t *aq) {
  const int64_t kb = (k + 31) / 32;
  for (int64_t i = 0; i < (m + 15) / 16 * 16; i++)
    for (int64_t q = 0; q < kb; q++) {
      uint16_t *h = aq + ((i / 16 * kb + q) * 2 * 16 + i % 16) * 32;
      const int64_t w = i < m ? (k - q * 32 < 32 ? k - q * 32 : 32) : 0;
      lumos_split32(a + i * sam + q * 32 * sak, sak, w, h, h + 512);
    }
}
/* lumos_gemm_windows' product as bf16x3: C's rows (all m) at 48 padded columns from j0 of
   B, B's row p read at pd + koff[p] (a convolution's windows in its padded input; the
   copy holds 96 floats past its end), the padded columns dropped on the way out. B's
   panel is split into scratch (3 tiles of 16 columns per 32 k, hi, then lo); per 16 rows
   of A, 3 tiles of C by 32 k a step, three products each. */
void lumos_amx_windows(int64_t m, int64_t k, const uint16_t *aq, const float *pd,
                       const int64_t *koff, int64_t j0, int64_t j, int64_t w, int64_t pw,
                       float *c, int64_t ldc) {
  const int64_t kb = (k + 31) / 32, nr = j - j0 < 48 ? j - j0 : 48;
  uint16_t *bp = lumos_amx_scratch(1, kb * 3072);
  for (int64_t q = 0; q < kb; q++)
    for (int64_t p = 0; p < 16; p++) {
      uint16_t h2[2][48] __attribute__((aligned(64))), l2[2][48] __attribute__((aligned(64)));
      for (int e = 0; e < 2; e++) {
        const int64_t r = q * 32 + 2 * p + e;
        if (r < k)
          for (int x = 0; x < 48; x += 16)
            lumos_split16(_mm512_loadu_ps(pd + koff[r] + j0 + x), h2[e] + x, l2[e] + x);
        else {
          memset(h2[e], 0, sizeof h2[e]);
          memset(l2[e], 0, sizeof l2[e]);
        }
      }
      for (int ct = 0; ct < 3; ct++) {
        lumos_pairs16(h2[0] + 16 * ct, h2[1] + 16 * ct, bp + (q * 6 + ct) * 512 + p * 32);
        lumos_pairs16(l2[0] + 16 * ct, l2[1] + 16 * ct, bp + (q * 6 + 3 + ct) * 512 + p * 32);
      }
    }
  lumos_amx_config();
  float t[16][48] __attribute__((aligned(64)));
  for (int64_t i0 = 0; i0 < m; i0 += 16) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    const uint16_t *a = aq + i0 / 16 * kb * 1024;
    for (int64_t q = 0; q < kb; q++) {
      const uint16_t *x = a + q * 1024, *y = bp + q * 3072;
      _tile_loadd(3, x, 64); /* Ahi Bhi */
      _tile_loadd(5, y, 64);
      _tile_loadd(6, y + 512, 64);
      _tile_loadd(7, y + 1024, 64);
      LUMOS_AMX_1X3(3);
      _tile_loadd(4, x + 512, 64); /* Alo Bhi */
      LUMOS_AMX_1X3(4);
      _tile_loadd(5, y + 1536, 64); /* Ahi Blo */
      _tile_loadd(6, y + 2048, 64);
      _tile_loadd(7, y + 2560, 64);
      LUMOS_AMX_1X3(3);
    }
    _tile_stored(0, t[0], 192);
    _tile_stored(1, t[0] + 16, 192);
    _tile_stored(2, t[0] + 32, 192);
    lumos_windows_out(t[0], 48, i0, m - i0 < 16 ? m - i0 : 16, j0, nr, w, pw, c, ldc);
  }
  _tile_release();
}
#else
void lumos_gemm_amx(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  lumos_cblas(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
}
int lumos_amx_ready(void) { return 0; }
int64_t lumos_amx_a_size(int64_t m, int64_t k) { return 0; }
void lumos_amx_pack_a(int64_t m, int64_t k, const float *a, int64_t sam, int64_t sak,
                      uint16_t *aq) {}
void lumos_amx_windows(int64_t m, int64_t k, const uint16_t *aq, const float *pd,
                       const int64_t *koff, int64_t j0, int64_t j, int64_t w, int64_t pw,
                       float *c, int64_t ldc) {
  abort(); /* (callers check lumos_amx_ready) */
}
#endif
