/* BLAS-like pseudo-instruction for tensorize's "blas" implementation (ISA Mapper §6.1/§7).
 *
 *   C[i, j] += sum_k A[i, k] * B[k, j]     0 <= i < M, 0 <= j < N, 0 <= k < K
 *
 * Every operand is addressed through an element stride per axis
 * (rs = stride of the row axis, cs = stride of the column axis), so the same
 * entry point serves transposed, strided (conv stride) and sub-tile operands.
 * The common case (cs_c == 1 and cs_b == 1) uses a register-blocked 4 x 64
 * accumulator tile that gcc -O3 -march=native keeps in vector registers.
 * Built at run time by tensorize/x86.py into the kernel cache directory.
 */
#include <stdint.h>

#define TVMEXT_MR 4
#define TVMEXT_NR 64

static void tile_contiguous(int32_t mr, int32_t nr, int32_t K,
                            float *restrict C, int32_t rs_c,
                            const float *restrict A, int32_t rs_a, int32_t cs_a,
                            const float *restrict B, int32_t rs_b) {
  float acc[TVMEXT_MR][TVMEXT_NR];
  for (int32_t i = 0; i < TVMEXT_MR; ++i)
    for (int32_t j = 0; j < TVMEXT_NR; ++j)
      acc[i][j] = (i < mr && j < nr) ? C[(int64_t)i * rs_c + j] : 0.0f;
  if (mr == TVMEXT_MR && nr == TVMEXT_NR) {
    for (int32_t k = 0; k < K; ++k) {
      const float *restrict b = B + (int64_t)k * rs_b;
      for (int32_t i = 0; i < TVMEXT_MR; ++i) {
        const float a = A[(int64_t)i * rs_a + (int64_t)k * cs_a];
        for (int32_t j = 0; j < TVMEXT_NR; ++j) acc[i][j] += a * b[j];
      }
    }
  } else {
    for (int32_t k = 0; k < K; ++k) {
      const float *restrict b = B + (int64_t)k * rs_b;
      for (int32_t i = 0; i < mr; ++i) {
        const float a = A[(int64_t)i * rs_a + (int64_t)k * cs_a];
        for (int32_t j = 0; j < nr; ++j) acc[i][j] += a * b[j];
      }
    }
  }
  for (int32_t i = 0; i < mr; ++i)
    for (int32_t j = 0; j < nr; ++j) C[(int64_t)i * rs_c + j] = acc[i][j];
}

int32_t tvmext_sgemm_acc(int32_t M, int32_t N, int32_t K,
                         float *C, int32_t rs_c, int32_t cs_c,
                         const float *A, int32_t rs_a, int32_t cs_a,
                         const float *B, int32_t rs_b, int32_t cs_b) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  if (cs_c == 1 && cs_b == 1) {
    for (int32_t j0 = 0; j0 < N; j0 += TVMEXT_NR) {
      const int32_t nr = N - j0 < TVMEXT_NR ? N - j0 : TVMEXT_NR;
      for (int32_t i0 = 0; i0 < M; i0 += TVMEXT_MR) {
        const int32_t mr = M - i0 < TVMEXT_MR ? M - i0 : TVMEXT_MR;
        tile_contiguous(mr, nr, K, C + (int64_t)i0 * rs_c + j0, rs_c,
                        A + (int64_t)i0 * rs_a, rs_a, cs_a, B + j0, rs_b);
      }
    }
    return 0;
  }
  /* general strides: k innermost, one scalar accumulator per output */
  for (int32_t i = 0; i < M; ++i)
    for (int32_t j = 0; j < N; ++j) {
      float s = C[(int64_t)i * rs_c + (int64_t)j * cs_c];
      for (int32_t k = 0; k < K; ++k)
        s += A[(int64_t)i * rs_a + (int64_t)k * cs_a] * B[(int64_t)k * rs_b + (int64_t)j * cs_b];
      C[(int64_t)i * rs_c + (int64_t)j * cs_c] = s;
    }
  return 0;
}
