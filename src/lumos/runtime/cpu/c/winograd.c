/* A stride-1 3x3 convolution by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray,
   2015): each 2x2 block of outputs of each output channel from the 4x4 block of padded
   input around it, as Y = A' [(G g G') . (B' d B)] A, summed over input channels: the
   products summed over channels are 16 matrix products (one per element of the 4x4
   transforms) of 4 multiplies per 2x2 outputs where the direct convolution does 9, the
   transforms additions (and halvings of the filter). Rounding: the transforms add and
   subtract at most four terms each, so the result lies within a few units of the last
   place of the terms' magnitude of the direct sum (tune's oracle check judges it).

   The product is KGemmWinograd's (kernels.Windows, winograd): C (m rows, one per output
   channel; column h * w + x the output position; batch index zg at zg * cstep) = A B, B
   the windows of `pd`: each batch index's padded input as [chans][hp][wp] (hp = h + 2,
   wp = w + 2), `bs` floats apart, with at least wp + 4 readable floats past the last.
   A(i, p) is a[i * sam + p * sak]; B's row p (an input channel and kernel offset) lies at
   pd + koff[p]: its channel koff[p] / (hp * wp), its offset dy, dx the rest / wp and % wp.

   Tiles of 2x2 outputs are taken 48 at a time (of all batch indices); for each block, the
   16 transformed inputs of every channel into scratch, the 16 products with the
   transformed filters (lumos_gemm_windows on 48 columns) and the output transform: a
   block to a thread, or (`phased`) each step for all blocks, split among the threads.
   A tile past the last row or column reads one row or column past its image: that value
   reaches only the outputs past it, which are not stored. */

/* U: the transformed filters, per element e of the 4x4 as 8-row strips of chans columns
   (lumos_gemm_windows' packed A), rows past m zero; each strip's 8 rows a vector */
static void lumos_winograd_u(int64_t m, int64_t chans, const float *a, int64_t sam,
                             int64_t sak, const int64_t *tap, float *u) {
  const int64_t m8 = (m + 7) / 8 * 8;
#pragma omp for schedule(static)
  for (int64_t s = 0; s < m8 / 8; s++)
    for (int64_t ch = 0; ch < chans; ch++) {
      float g[9][8], gg[4][3][8];
      for (int k = 0; k < 9; k++) {
        const float *col = a + tap[ch * 9 + k] * sak + s * 8 * sam;
        for (int ii = 0; ii < 8; ii++) g[k][ii] = s * 8 + ii < m ? col[ii * sam] : 0.0f;
      }
      for (int q = 0; q < 3; q++) /* G g: rows g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2 */
        for (int ii = 0; ii < 8; ii++) {
          const float g0 = g[q][ii], g1 = g[3 + q][ii], g2 = g[6 + q][ii], e = g0 + g2;
          gg[0][q][ii] = g0, gg[1][q][ii] = 0.5f * (e + g1);
          gg[2][q][ii] = 0.5f * (e - g1), gg[3][q][ii] = g2;
        }
      for (int r = 0; r < 4; r++) { /* (G g) G', the same along the columns */
        float *o = u + ((4 * r * (m8 / 8) + s) * chans + ch) * 8;
        const int64_t step = m8 * chans; /* one element of the 4x4 to the next */
        for (int ii = 0; ii < 8; ii++) {
          const float g0 = gg[r][0][ii], g1 = gg[r][1][ii], g2 = gg[r][2][ii], e = g0 + g2;
          o[ii] = g0, o[step + ii] = 0.5f * (e + g1);
          o[2 * step + ii] = 0.5f * (e - g1), o[3 * step + ii] = g2;
        }
      }
    }
}

/* the transformed inputs of channels [c0, c1) at nt (<= 48) tiles from tile t0 into v:
   element e's row of channel ch at v + e * ve + ch * ld. The tiles are taken in runs along
   an image row of tiles, each run a loop the compiler vectorizes (reads two floats apart,
   writes in order) */
static void lumos_winograd_in(int64_t c0, int64_t c1, const float *pd, int64_t bs,
                              int64_t hp, int64_t wp, int64_t h, int64_t w, int64_t t0,
                              int64_t nt, float *v, int64_t ld, int64_t ve) {
  const int64_t tw = (w + 1) / 2, per = (h + 1) / 2 * tw;
  for (int64_t j0 = 0; j0 < nt;) {
    const int64_t t = t0 + j0, g = t / per, ty = t % per / tw, tx = t % per % tw;
    const int64_t len = tw - tx < nt - j0 ? tw - tx : nt - j0;
    for (int64_t ch = c0; ch < c1; ch++) {
      const float *p = pd + g * bs + ch * hp * wp + 2 * ty * wp + 2 * tx;
      float *o = v + ch * ld + j0;
#pragma GCC ivdep
      for (int64_t j = 0; j < len; j++) { /* B' d B: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3 */
        float e[4][4];
        for (int q = 0; q < 4; q++) {
          const float d0 = p[2 * j + q], d1 = p[wp + 2 * j + q], d2 = p[2 * wp + 2 * j + q],
                      d3 = p[3 * wp + 2 * j + q];
          e[0][q] = d0 - d2, e[1][q] = d1 + d2, e[2][q] = d2 - d1, e[3][q] = d1 - d3;
        }
        for (int r = 0; r < 4; r++) {
          o[(4 * r) * ve + j] = e[r][0] - e[r][2];
          o[(4 * r + 1) * ve + j] = e[r][1] + e[r][2];
          o[(4 * r + 2) * ve + j] = e[r][2] - e[r][1];
          o[(4 * r + 3) * ve + j] = e[r][1] - e[r][3];
        }
      }
    }
    j0 += len;
  }
}

/* output channels [i0, i1) at nt (<= 48) tiles from tile t0 from y (element e's row of
   channel i at y + e * ye + i * ld) into c: computed along the tiles, stored in runs */
static void lumos_winograd_out(int64_t i0, int64_t i1, const float *y, int64_t ld,
                               int64_t ye, int64_t h, int64_t w, int64_t t0, int64_t nt,
                               float *c, int64_t ldc, int64_t cstep) {
  const int64_t tw = (w + 1) / 2, per = (h + 1) / 2 * tw;
  for (int64_t i = i0; i < i1; i++) {
    float z[4][48];
    const float *x = y + i * ld;
    for (int64_t j = 0; j < 48; j++) { /* A' M A: rows m0 + m1 + m2, m1 - m2 - m3 */
      float r[2][4];
      for (int q = 0; q < 4; q++) {
        const float m0 = x[q * ye + j], m1 = x[(4 + q) * ye + j], m2 = x[(8 + q) * ye + j],
                    m3 = x[(12 + q) * ye + j];
        r[0][q] = m0 + m1 + m2, r[1][q] = m1 - m2 - m3;
      }
      z[0][j] = r[0][0] + r[0][1] + r[0][2], z[1][j] = r[0][1] - r[0][2] - r[0][3];
      z[2][j] = r[1][0] + r[1][1] + r[1][2], z[3][j] = r[1][1] - r[1][2] - r[1][3];
    }
    for (int64_t j0 = 0; j0 < nt;) { /* stored in runs along an image row of tiles */
      const int64_t t = t0 + j0, g = t / per, ty = t % per / tw, tx = t % per % tw;
      const int64_t len = tw - tx < nt - j0 ? tw - tx : nt - j0;
      const int64_t full = len - (tx + len == tw && w % 2); /* (the last: one column) */
      float *o = c + g * cstep + i * ldc + 2 * ty * w + 2 * tx;
#pragma GCC ivdep
      for (int64_t j = 0; j < full; j++) o[2 * j] = z[0][j0 + j], o[2 * j + 1] = z[1][j0 + j];
      if (full < len) o[2 * full] = z[0][j0 + full];
      if (2 * ty + 1 < h) {
#pragma GCC ivdep
        for (int64_t j = 0; j < full; j++)
          o[w + 2 * j] = z[2][j0 + j], o[w + 2 * j + 1] = z[3][j0 + j];
        if (full < len) o[w + 2 * full] = z[2][j0 + full];
      }
      j0 += len;
    }
  }
}

/* `phased` 0: the threads take blocks of 48 tiles, each block's inputs transformed, its 16
   products and its outputs by one thread (in cache); 1: each step across all tiles, the
   threads splitting it (input channels, then products of 48 columns, then output channels:
   every thread busy where there are few blocks) */
void lumos_winograd(int64_t m, int64_t chans, int64_t batches, const float *a, int64_t sam,
                    int64_t sak, const int64_t *koff, const float *pd, int64_t bs, int64_t hp,
                    int64_t wp, int64_t h, int64_t w, float *c, int64_t ldc, int64_t cstep,
                    int phased) {
  const int64_t m8 = (m + 7) / 8 * 8, tiles = batches * ((h + 1) / 2) * ((w + 1) / 2);
  const int64_t blocks = (tiles + 47) / 48, ld = phased ? blocks * 48 : 48;
  /* (scratch of this unit's own: lumos_tile's arrays are per unit and thread) */
  float *u = lumos_tile(0, 16 * m8 * chans);
  int64_t *tap = (int64_t *)lumos_tile(1, 2 * (chans * 9 + chans));
  int64_t *kv = tap + chans * 9; /* row p of the transformed inputs: ld floats apart */
  float *all = phased ? lumos_tile(2, 16 * (chans + m) * ld) : 0;
  for (int64_t p = 0; p < chans * 9; p++) {
    const int64_t ch = koff[p] / (hp * wp), r = koff[p] % (hp * wp);
    tap[ch * 9 + r / wp * 3 + r % wp] = p;
  }
  for (int64_t p = 0; p < chans; p++) kv[p] = p * ld;
#pragma omp parallel num_threads(lumos_threads())
  {
    lumos_winograd_u(m, chans, a, sam, sak, tap, u);
    if (phased) {
      float *v = all, *y = all + 16 * chans * ld;
#pragma omp for schedule(static)
      for (int64_t k = 0; k < chans * blocks; k++) {
        const int64_t t0 = k % blocks * 48;
        lumos_winograd_in(k / blocks, k / blocks + 1, pd, bs, hp, wp, h, w, t0,
                          tiles - t0 < 48 ? tiles - t0 : 48, v + t0, ld, chans * ld);
      }
#pragma omp for schedule(static)
      for (int64_t k = 0; k < 16 * blocks; k++) {
        const int64_t e = k / blocks, t0 = k % blocks * 48;
        lumos_gemm_windows(m, chans, u + e * m8 * chans, v + e * chans * ld + t0, kv, 0, 48,
                           48, 48, y + e * m * ld + t0, ld);
      }
#pragma omp for schedule(static)
      for (int64_t k = 0; k < m * blocks; k++) {
        const int64_t t0 = k % blocks * 48;
        lumos_winograd_out(k / blocks, k / blocks + 1, y + t0, ld, m * ld, h, w, t0,
                           tiles - t0 < 48 ? tiles - t0 : 48, c, ldc, cstep);
      }
    } else {
      float *v = lumos_tile(2, 16 * chans * 48 + 16 * m * 48), *y = v + 16 * chans * 48;
#pragma omp for schedule(dynamic)
      for (int64_t t0 = 0; t0 < tiles; t0 += 48) {
        const int64_t nt = tiles - t0 < 48 ? tiles - t0 : 48;
        lumos_winograd_in(0, chans, pd, bs, hp, wp, h, w, t0, nt, v, 48, chans * 48);
        for (int e = 0; e < 16; e++)
          lumos_gemm_windows(m, chans, u + e * m8 * chans, v + e * chans * 48, kv, 0, 48, 48,
                             48, y + e * m * 48, 48);
        lumos_winograd_out(0, m, y, 48, m * 48, h, w, t0, nt, c, ldc, cstep);
      }
    }
  }
}
