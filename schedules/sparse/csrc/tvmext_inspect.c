/* Compiled inspector helpers (schedules/sparse/inspectors.py, selection.py).
 *
 * CSR -> BCSR construction for the BCSR inspector (to_bcsr).
 *
 * Fig. 5.7's closed form (Venkat 2016): block row ii = i / R, block column kk = col / C,
 * A_prime[block, i - R*ii, col - C*kk].  A block row's blocks are the distinct kk of its R
 * rows, in ascending order.
 *
 * Two calls per range of block rows [br0, br1), so that a caller can run ranges on
 * several threads: bcsr_count writes the blocks of each block row, the caller turns them
 * into block pointers, and bcsr_fill_* writes bcol and data (each block is zeroed once, then
 * its non-zeros written: data needs no prior zeroing).
 *
 * The count uses a mark per block column (as scipy's CSR -> BSR converter does), in a pass
 * without data-dependent branches: each non-zero stores its block row's tag at mark[kk] and
 * counts one block when the mark held another tag (it allocates its marks, one int32 per
 * block column, and returns -1 when it cannot).  The fill is an R-way merge of the block row's
 * sorted rows by kk: the smallest kk among the row heads is the next block, every head whose
 * column falls in it advances; blocks come out in block-column order.  (A mark-numbered
 * scatter fill measured 1-2x slower than the merge: it reads every non-zero twice.)
 *
 * Column indices are int32 and sorted within each row (canonical CSR).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_R 64
#define INLINE static inline __attribute__((always_inline))

/* The R rows of block row ib: heads pos[], ends end[], each head's block column kk[] (INT32_MAX
 * once the row is done); returns the number of rows (fewer than R in a ragged last block row). */
INLINE int32_t open_rows(int32_t R, int32_t C, int32_t M, const int32_t *indptr, const int32_t *indices,
                         int64_t ib, int64_t *pos, int64_t *end, int32_t *kk) {
    int32_t nr = 0;
    for (int32_t r = 0; r < R; ++r) {
        int64_t i = ib * R + r;
        if (i >= M) break;
        pos[nr] = indptr[i];
        end[nr] = indptr[i + 1];
        kk[nr] = pos[nr] < end[nr] ? indices[pos[nr]] / C : INT32_MAX;
        ++nr;
    }
    return nr;
}

INLINE int32_t smallest(const int32_t *kk, int32_t nr) {
    int32_t kmin = INT32_MAX;
    for (int32_t r = 0; r < nr; ++r)
        kmin = kk[r] < kmin ? kk[r] : kmin;
    return kmin;
}

/* Block columns seen in the current block row: mark[kk] == ib + 1 once kk was seen in block
 * row ib.  A calloc'ed array (zero = unseen) of one int32 per block column, private to the
 * calling thread. */
INLINE int32_t *new_marks(int32_t K, int32_t C) {
    int64_t n_bc = ((int64_t)K + C - 1) / C;
    return (int32_t *)calloc((size_t)(n_bc > 0 ? n_bc : 1) + 1, sizeof(int32_t));
}

/* The distinct block columns of block row ib: one branch-free pass over its non-zeros. */
INLINE int64_t distinct_blocks(int32_t R, int32_t C, int32_t M, const int32_t *indptr,
                               const int32_t *indices, int64_t ib, int32_t *mark) {
    const int32_t tag = (int32_t)(ib + 1);
    int64_t n = 0;
    int64_t i1 = (ib + 1) * R < M ? (ib + 1) * R : M;
    for (int64_t i = ib * R; i < i1; ++i)
        for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
            int32_t kk = indices[p] / C;
            n += mark[kk] != tag;
            mark[kk] = tag;
        }
    return n;
}

INLINE int count_impl(int32_t R, int32_t C, int32_t M, int32_t K, const int32_t *indptr,
                      const int32_t *indices, int64_t br0, int64_t br1, int64_t *counts) {
    int32_t *mark = new_marks(K, C);
    if (!mark) return -1;
    for (int64_t ib = br0; ib < br1; ++ib)
        counts[ib - br0] = distinct_blocks(R, C, M, indptr, indices, ib, mark);
    free(mark);
    return 0;
}

/* Per block row: an R-way merge of its sorted rows by block column (the smallest head's kk is
 * the next block; every head in it advances), each block zeroed then written. */
#define FILL_IMPL(NAME, T)                                                                        \
INLINE void NAME(int32_t R, int32_t C, int32_t M, const int32_t *indptr, const int32_t *indices,  \
                 const T *values, int64_t br0, int64_t br1, const int64_t *bptr, int32_t *bcol,   \
                 T *data) {                                                                       \
    int64_t pos[MAX_R], end[MAX_R];                                                               \
    int32_t kk[MAX_R];                                                                            \
    const int64_t rc = (int64_t)R * C;                                                            \
    for (int64_t ib = br0; ib < br1; ++ib) {                                                      \
        int32_t nr = open_rows(R, C, M, indptr, indices, ib, pos, end, kk);                       \
        int64_t b = bptr[ib];                                                                     \
        for (int32_t kmin = smallest(kk, nr); kmin != INT32_MAX; kmin = smallest(kk, nr), ++b) {  \
            T *blk = data + b * rc;                                                               \
            for (int64_t j = 0; j < rc; ++j) blk[j] = 0;                                          \
            bcol[b] = kmin;                                                                       \
            int32_t c0 = kmin * C;                                                                \
            for (int32_t r = 0; r < nr; ++r)                                                      \
                while (kk[r] == kmin) {                                                           \
                    blk[(int64_t)r * C + (indices[pos[r]] - c0)] = values[pos[r]];                \
                    kk[r] = ++pos[r] < end[r] ? indices[pos[r]] / C : INT32_MAX;                  \
                }                                                                                 \
        }                                                                                         \
    }                                                                                             \
}

FILL_IMPL(fill_impl_f32, float)
FILL_IMPL(fill_impl_f64, double)

/* Each entry point dispatches the common block widths to a copy with C a constant (the
 * division by C becomes a multiply), and the fill also the common heights (its R-way merge
 * unrolled, the row heads in registers). */
#define BY_WIDTH(CALL)                                                                            \
    switch (C) {                                                                                  \
    case 1: CALL(1); break;                                                                       \
    case 2: CALL(2); break;                                                                       \
    case 3: CALL(3); break;                                                                       \
    case 4: CALL(4); break;                                                                       \
    case 6: CALL(6); break;                                                                       \
    case 8: CALL(8); break;                                                                       \
    default: CALL(C);                                                                             \
    }

#define BY_HEIGHT(CALL, W)                                                                        \
    switch (R) {                                                                                  \
    case 1: CALL(1, W); break;                                                                    \
    case 2: CALL(2, W); break;                                                                    \
    case 3: CALL(3, W); break;                                                                    \
    case 4: CALL(4, W); break;                                                                    \
    default: CALL(R, W);                                                                          \
    }

/* Blocks of every block row in [br0, br1): counts[ib - br0]; 0, or -1 when out of memory. */
int tvmext_bcsr_count(int32_t R, int32_t C, int32_t M, int32_t K, const int32_t *indptr,
                      const int32_t *indices, int64_t br0, int64_t br1, int64_t *counts) {
    int rc = 0;
#define COUNT(W) rc = count_impl(R, W, M, K, indptr, indices, br0, br1, counts)
    BY_WIDTH(COUNT)
    return rc;
}

/* bcol and data of the blocks of block rows [br0, br1); block row ib starts at bptr[ib]. */
void tvmext_bcsr_fill_f32(int32_t R, int32_t C, int32_t M, const int32_t *indptr, const int32_t *indices,
                          const float *values, int64_t br0, int64_t br1, const int64_t *bptr,
                          int32_t *bcol, float *data) {
#define FILL32_RC(H, W) fill_impl_f32(H, W, M, indptr, indices, values, br0, br1, bptr, bcol, data)
#define FILL32(W) BY_HEIGHT(FILL32_RC, W)
    BY_WIDTH(FILL32)
}

void tvmext_bcsr_fill_f64(int32_t R, int32_t C, int32_t M, const int32_t *indptr, const int32_t *indices,
                          const double *values, int64_t br0, int64_t br1, const int64_t *bptr,
                          int32_t *bcol, double *data) {
#define FILL64_RC(H, W) fill_impl_f64(H, W, M, indptr, indices, values, br0, br1, bptr, bcol, data)
#define FILL64(W) BY_HEIGHT(FILL64_RC, W)
    BY_WIDTH(FILL64)
}

/* Occupied diagonals of rows [r0, r1): mark[col - i + M - 1] = 1 for every non-zero (the
 * selector's DIA features; one pass, no per-non-zero index array).  mark has M + K - 1 bytes.
 * Returns the diagonals this call marked first; once that passes limit (> 0) it stops: the
 * matrix has more than limit diagonals, and the marks are incomplete. */
int64_t tvmext_mark_diagonals(int32_t M, const int32_t *indptr, const int32_t *indices, int64_t r0,
                              int64_t r1, uint8_t *mark, int64_t limit) {
    int64_t found = 0;
    for (int64_t i = r0; i < r1; ++i) {
        uint8_t *row = mark + (M - 1 - i);
        for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
            found += !row[indices[p]];
            row[indices[p]] = 1;
        }
        if (limit > 0 && found > limit) break;
    }
    return found;
}
