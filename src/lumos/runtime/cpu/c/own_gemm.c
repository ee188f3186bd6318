
/* Columns [0, nr) of C = A B (nr <= 16 NV), all m rows, single-threaded: MR rows at a time
   in MR x NV vector registers, each element of A broadcast from where it lies (A(i, p) at
   a[i * sam + p * sak]; the last block's missing rows read row m - 1 again and are not
   stored), B from bp: k rows of 16 NV floats, zero-padded. No copy of A (OpenBLAS copies
   both factors, a cost the products of a few columns or a short k do not amortize). */
#define LUMOS_GEMM_OWN(NV, MR)                                                                \
static void lumos_gemm_own##NV(int64_t m, int64_t nr, int64_t k, const float *a, int64_t sam,  \
                               int64_t sak, const float *bp, float *c, int64_t ldc) {           \
  for (int64_t i0 = 0; i0 < m; i0 += MR) {                                                     \
    const float *ar[MR];                                                                        \
    for (int i = 0; i < MR; i++) ar[i] = a + (i0 + i < m ? i0 + i : m - 1) * sam;             \
    lumos_f32x16 acc[MR][NV];                                                                   \
    for (int i = 0; i < MR; i++)                                                                \
      for (int v = 0; v < NV; v++) acc[i][v] = (lumos_f32x16){0};                              \
    for (int64_t p = 0; p < k; p++) {                                                           \
      lumos_f32x16 b[NV];                                                                       \
      for (int v = 0; v < NV; v++) b[v] = *(const lumos_f32x16u *)(bp + (p * NV + v) * 16);    \
      for (int i = 0; i < MR; i++) {                                                            \
        const lumos_f32x16 x = LUMOS_SPLAT_F32X16(ar[i][p * sak]);                              \
        for (int v = 0; v < NV; v++) acc[i][v] = LUMOS_FMA_F32X16(x, b[v], acc[i][v]);        \
      }                                                                                         \
    }                                                                                           \
    for (int i = 0; i < MR && i0 + i < m; i++) {                                                \
      float *ci = c + (i0 + i) * ldc;                                                           \
      for (int v = 0; v < NV - 1; v++) *(lumos_f32x16u *)(ci + 16 * v) = acc[i][v];            \
      LUMOS_STORE_F32X16_FIRST(ci + 16 * (NV - 1), acc[i][NV - 1], nr - 16 * (NV - 1));        \
    }                                                                                           \
  }                                                                                             \
}
LUMOS_GEMM_OWN(1, 8)
LUMOS_GEMM_OWN(2, 12)
LUMOS_GEMM_OWN(3, 8)
LUMOS_GEMM_OWN(4, 6)
@TRANSPOSE16@
/* C = A B (m x n, k) with B stored transposed (tb: column j of B is row j of w, ldb apart,
   a linear layer's weight), single-threaded, read where it lies: A's rows 16 at a time
   copied as k vectors of 16 (column p of the block, zero past m), then for each 16 columns
   of C, accumulators (a column of C over a block's rows) += A's column p times w(j, p)
   broadcast from memory, p in order: 4 blocks by 4 columns at a time (16 vector registers,
   each column of w read by 4 blocks), a remaining block by all 16 columns; transposed into
   rows to store. The next 16 rows of w are fetched ahead. OpenBLAS copies both factors
   first, a cost that a few rows of A do not repay (kernels.ROWS_MAX_M). */
static void lumos_gemm_rows(int64_t m, int64_t n, int64_t k, const float *a, int64_t sam,
                            int64_t sak, const float *w, int64_t ldb, float *c, int64_t ldc) {
  const int64_t mb = (m + 15) / 16;
  lumos_f32x16 *restrict at = (lumos_f32x16 *)(((uintptr_t)lumos_tile(0, 16 * (k + 16) * mb + 16)
                                                + 63) & ~(uintptr_t)63);
  lumos_f32x16 *restrict cols = at + mb * k; /* per block: its 16 columns of C */
  /* a tile of 16 columns runs mb passes over w's 16 rows (4 columns of 4 blocks, or a block
     left over): each fetches its share of the next 16 rows ahead, into L2 (all of them in
     the first pass left cold lines in the others' way: 283 -> 304 GFLOP/s at 128 x 32000
     x 512, the weight out of cache) */
  const int passes = (int)mb;
  for (int64_t ib = 0; ib < mb; ib++) {
    lumos_f32x16 *restrict q = at + ib * k;
    int64_t p = 0;
    if (sak == 1 && ib * 16 + 16 <= m)
      for (; p + 16 <= k; p += 16) {
        lumos_f32x16 r[16];
        for (int i = 0; i < 16; i++) r[i] = *(const lumos_f32x16u *)(a + (ib * 16 + i) * sam + p);
        lumos_transpose16(r);
        for (int s = 0; s < 16; s++) q[p + s] = r[s];
      }
    for (; p < k; p++)
      for (int i = 0; i < 16; i++)
        q[p][i] = ib * 16 + i < m ? a[(ib * 16 + i) * sam + p * sak] : 0.0f;
  }
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t jn = n - j0 < 16 ? n - j0 : 16;
    const float *wj = w + j0 * ldb;
    const int ahead = j0 + 32 <= n;
    int64_t ib = 0;
    for (; jn == 16 && ib + 4 <= mb; ib += 4)
      for (int h = 0; h < 16; h += 4) {
        const lumos_f32x16 *q = at + ib * k;
        const float *wh = wj + h * ldb;
        const int pass = ib + h / 4;
        lumos_f32x16 acc[4][4];
        for (int u = 0; u < 4; u++)
          for (int j = 0; j < 4; j++) acc[u][j] = (lumos_f32x16){0};
        for (int64_t p = 0; p < k; p++) {
          if (!(p & 15) && ahead)
            for (int j = pass; j < 16; j += passes)
              __builtin_prefetch(wj + (16 + j) * ldb + p, 0, 2);
          const lumos_f32x16 x0 = q[p], x1 = q[k + p], x2 = q[2 * k + p], x3 = q[3 * k + p];
          for (int j = 0; j < 4; j++) {
            const lumos_f32x16 s = LUMOS_SPLAT_F32X16(wh[j * ldb + p]);
            acc[0][j] = LUMOS_FMA_F32X16(x0, s, acc[0][j]);
            acc[1][j] = LUMOS_FMA_F32X16(x1, s, acc[1][j]);
            acc[2][j] = LUMOS_FMA_F32X16(x2, s, acc[2][j]);
            acc[3][j] = LUMOS_FMA_F32X16(x3, s, acc[3][j]);
          }
        }
        for (int u = 0; u < 4; u++)
          for (int j = 0; j < 4; j++) cols[(ib + u) * 16 + h + j] = acc[u][j];
      }
    for (; ib < mb; ib++) {
      const lumos_f32x16 *q = at + ib * k;
      lumos_f32x16 acc[16];
      for (int j = 0; j < 16; j++) acc[j] = (lumos_f32x16){0};
      if (jn == 16) {
        int64_t p = 0;
        for (; p + 4 <= k; p += 4) {
          if (!(p & 15) && ahead)
            for (int j = (int)ib; j < 16; j += passes)
              __builtin_prefetch(wj + (16 + j) * ldb + p, 0, 2);
          const lumos_f32x16 x0 = q[p], x1 = q[p + 1], x2 = q[p + 2], x3 = q[p + 3];
          for (int j = 0; j < 16; j++) {
            const float *wp = wj + j * ldb + p;
            acc[j] = LUMOS_FMA_F32X16(x0, LUMOS_SPLAT_F32X16(wp[0]), acc[j]);
            acc[j] = LUMOS_FMA_F32X16(x1, LUMOS_SPLAT_F32X16(wp[1]), acc[j]);
            acc[j] = LUMOS_FMA_F32X16(x2, LUMOS_SPLAT_F32X16(wp[2]), acc[j]);
            acc[j] = LUMOS_FMA_F32X16(x3, LUMOS_SPLAT_F32X16(wp[3]), acc[j]);
          }
        }
        for (; p < k; p++)
          for (int j = 0; j < 16; j++)
            acc[j] = LUMOS_FMA_F32X16(q[p], LUMOS_SPLAT_F32X16(wj[j * ldb + p]), acc[j]);
      } else {
        for (int j = 0; j < jn; j++)
          for (int64_t p = 0; p < k; p++)
            acc[j] = LUMOS_FMA_F32X16(q[p], LUMOS_SPLAT_F32X16(wj[j * ldb + p]), acc[j]);
      }
      for (int j = 0; j < 16; j++) cols[ib * 16 + j] = acc[j];
    }
    for (ib = 0; ib < mb; ib++) {
      lumos_f32x16 r[16];
      for (int j = 0; j < 16; j++) r[j] = cols[ib * 16 + j];
      lumos_transpose16(r); /* r[i]: the block's row i, 16 columns */
      for (int i = 0; i < 16 && ib * 16 + i < m; i++)
        LUMOS_STORE_F32X16_FIRST(c + (ib * 16 + i) * ldc + j0, r[i], jn);
    }
  }
}
/* C = A B (row-major, as cblas_sgemm with alpha 1 and beta 0), single-threaded, by lumos'
   own kernel (kernels.Tile.own, Kernels.own): B copied into this unit's scratch as panels
   of 64 columns, each k rows of its width rounded up to 16 and zero-padded, then each
   panel's columns of C for all rows of A (held in L1 across the panels); B stored transposed
   (a linear layer's weight) and A a few rows: lumos_gemm_rows */
void lumos_gemm_own(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  if (tb && m <= @ROWS_MAX_M@) {
    lumos_gemm_rows(m, n, k, a, ta ? 1 : lda, ta ? lda : 1, b, ldb, c, ldc);
    return;
  }
  float *restrict bp = lumos_tile(0, (n + 15) / 16 * 16 * k);
  for (int64_t j0 = 0; j0 < n; j0 += 64) {
    const int64_t w = n - j0 < 64 ? n - j0 : 64, wp = (w + 15) / 16 * 16;
    float *restrict q = bp + j0 * k;
    for (int64_t p = 0; p < k; p++)
      for (int64_t j = 0; j < wp; j++)
        q[p * wp + j] = j >= w ? 0.0f : tb ? b[(j0 + j) * ldb + p] : b[p * ldb + j0 + j];
  }
  const int64_t sam = ta ? 1 : lda, sak = ta ? lda : 1;
  for (int64_t j0 = 0; j0 < n; j0 += 64) {
    const int64_t w = n - j0 < 64 ? n - j0 : 64;
    const float *q = bp + j0 * k;
    switch ((w + 15) / 16) {
      case 1: lumos_gemm_own1(m, w, k, a, sam, sak, q, c + j0, ldc); break;
      case 2: lumos_gemm_own2(m, w, k, a, sam, sak, q, c + j0, ldc); break;
      case 3: lumos_gemm_own3(m, w, k, a, sam, sak, q, c + j0, ldc); break;
      default: lumos_gemm_own4(m, w, k, a, sam, sak, q, c + j0, ldc);
    }
  }
}
