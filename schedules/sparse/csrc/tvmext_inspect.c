/* Compiled inspector helpers (schedules/sparse/inspectors.py, selection.py).
 *
 * CSR -> BCSR construction for the BCSR inspector (to_bcsr), and the selector's feature passes
 * (occupied diagonals, sampled block counts).
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
 * The count uses a mark per block column (as scipy's CSR -> BSR converter does): the first
 * non-zero of each run of one block column in a row stores its block row's tag at mark[kk] and
 * counts one block when the mark held another tag (it allocates its marks, one int32 per
 * block column, and returns -1 when it cannot).  The fill is an R-way merge of the block row's
 * sorted rows by kk: the smallest kk among the row heads is the next block, every head whose
 * column falls in it advances; blocks come out in block-column order (a block row of two rows
 * by a two-pointer merge, merge2_*).  (A mark-numbered
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

/* The rows of block row ib when they all have the first row's columns (one sparsity pattern,
 * as the unknowns of one node of a FEM mesh have; a single row always does), else 0.  Its
 * blocks are then the runs of one block column in the first row, and the fill copies the
 * rows' values run by run with no merge. */
INLINE int32_t same_pattern(int32_t R, int32_t M, const int32_t *indptr, const int32_t *indices, int64_t ib) {
    int64_t i0 = ib * R, i1 = i0 + R < M ? i0 + R : M;
    int64_t len = indptr[i0 + 1] - indptr[i0];
    const int32_t *first = indices + indptr[i0];
    for (int64_t i = i0 + 1; i < i1; ++i)
        if (indptr[i + 1] - indptr[i] != len || memcmp(indices + indptr[i], first, (size_t)len * 4) != 0)
            return 0;
    return (int32_t)(i1 - i0);
}

/* Whether row i has the columns of row i - 1 (the sampled count's int64 row pointers). */
INLINE int32_t repeats_previous_row(const int64_t *indptr, const int32_t *indices, int64_t i) {
    int64_t len = indptr[i + 1] - indptr[i];
    return indptr[i] - indptr[i - 1] == len &&
           memcmp(indices + indptr[i], indices + indptr[i - 1], (size_t)len * 4) == 0;
}

/* The distinct block columns of block row ib: one pass over its non-zeros.  A row's columns
 * are sorted, so a non-zero in the same block column as the one before it adds nothing: with
 * C > 1 only the first of each run reads and writes its mark (C = 1 has no runs).  *one_pattern
 * receives whether its rows share one pattern (same_pattern), for the fill. */
INLINE int64_t distinct_blocks(int32_t R, int32_t C, int32_t M, const int32_t *indptr,
                               const int32_t *indices, int64_t ib, int32_t *mark, uint8_t *one_pattern) {
    const int32_t tag = (int32_t)(ib + 1);
    int64_t n = 0;
    int64_t i1 = (ib + 1) * R < M ? (ib + 1) * R : M;
    *one_pattern = same_pattern(R, M, indptr, indices, ib) != 0;
    if (*one_pattern) {  /* the runs of the first row */
        int32_t prev = -1;
        for (int64_t p = indptr[ib * R]; p < indptr[ib * R + 1]; ++p) {
            int32_t kk = indices[p] / C;
            n += kk != prev;
            prev = kk;
        }
        return n;
    }
    for (int64_t i = ib * R; i < i1; ++i) {
        int32_t prev = -1;
        for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
            int32_t kk = indices[p] / C;
            if (C == 1 || kk != prev) {
                n += mark[kk] != tag;
                mark[kk] = tag;
                prev = kk;
            }
        }
    }
    return n;
}

INLINE int count_impl(int32_t R, int32_t C, int32_t M, int32_t K, const int32_t *indptr,
                      const int32_t *indices, int64_t br0, int64_t br1, int64_t *counts, uint8_t *pattern) {
    int32_t *mark = new_marks(K, C);
    if (!mark) return -1;
    for (int64_t ib = br0; ib < br1; ++ib)
        counts[ib - br0] = distinct_blocks(R, C, M, indptr, indices, ib, mark, pattern + ib);
    free(mark);
    return 0;
}

/* A whole block row of two rows (R = 2): a two-pointer merge of rows a and b by block column,
 * the pointers and the rows' ends in registers (the general R-way merge keeps its heads in arrays
 * and finds the smallest by a loop: 3x slower on HPCG's 27-point rows at 2 x 1).  With C = 1 a
 * block holds at most one entry per row, written with its partner (or a zero) in one step;
 * otherwise each block is zeroed and each row's run of entries in it copied.  Returns the next
 * block's index. */
#define MERGE2_IMPL(NAME, T)                                                                      \
INLINE int64_t NAME(int32_t C, const int32_t *ia, const T *va, int64_t na, const int32_t *ib,     \
                    const T *vb, int64_t nb, int32_t *bcol, T *data, int64_t b) {                 \
    int64_t i = 0, j = 0;                                                                         \
    if (C == 1) {                                                                                 \
        for (; i < na && j < nb; ++b) {                                                           \
            int32_t ca = ia[i], cb = ib[j];                                                       \
            T *blk = data + 2 * b;                                                                \
            if (ca < cb) {                                                                        \
                bcol[b] = ca; blk[0] = va[i++]; blk[1] = 0;                                       \
            } else if (cb < ca) {                                                                 \
                bcol[b] = cb; blk[0] = 0; blk[1] = vb[j++];                                       \
            } else {                                                                              \
                bcol[b] = ca; blk[0] = va[i++]; blk[1] = vb[j++];                                 \
            }                                                                                     \
        }                                                                                         \
        for (; i < na; ++i, ++b) { bcol[b] = ia[i]; data[2 * b] = va[i]; data[2 * b + 1] = 0; }   \
        for (; j < nb; ++j, ++b) { bcol[b] = ib[j]; data[2 * b] = 0; data[2 * b + 1] = vb[j]; }   \
        return b;                                                                                 \
    }                                                                                             \
    while (i < na || j < nb) {                                                                    \
        int32_t ka = i < na ? ia[i] / C : INT32_MAX, kb = j < nb ? ib[j] / C : INT32_MAX;         \
        int32_t k = ka < kb ? ka : kb, c0 = k * C;                                                \
        T *blk = data + b * 2 * C;                                                                \
        for (int32_t q = 0; q < 2 * C; ++q) blk[q] = 0;                                           \
        bcol[b++] = k;                                                                            \
        for (; i < na && ia[i] < c0 + C; ++i) blk[ia[i] - c0] = va[i];                            \
        for (; j < nb && ib[j] < c0 + C; ++j) blk[C + ib[j] - c0] = vb[j];                        \
    }                                                                                             \
    return b;                                                                                     \
}
MERGE2_IMPL(merge2_f32, float)
MERGE2_IMPL(merge2_f64, double)

/* Per block row: an R-way merge of its sorted rows by block column (the smallest head's kk is
 * the next block; every head in it advances), each block zeroed then written; rows of one
 * pattern (pattern[ib], found by the count pass) are copied run by run instead, a whole block
 * row's R rows with R a constant, and a dense block (the run is all C columns) with no zeroing. */
#define COPY_RUN(NR)                                                                              \
    do {                                                                                          \
        int32_t off = indices[p] - c0;                                                            \
        for (int32_t r = 0; r < (NR); ++r)                                                        \
            blk[(int64_t)r * C + off] = values[p + pos[r]];                                       \
    } while (++p < e && indices[p] / C == k0)
#define FILL_IMPL(NAME, T, MERGE2)                                                                \
INLINE void NAME(int32_t R, int32_t C, int32_t M, const int32_t *indptr, const int32_t *indices,  \
                 const T *values, int64_t br0, int64_t br1, const int64_t *bptr, int32_t *bcol,   \
                 T *data, const uint8_t *pattern) {                                               \
    int64_t pos[MAX_R], end[MAX_R];                                                               \
    int32_t kk[MAX_R];                                                                            \
    const int64_t rc = (int64_t)R * C;                                                            \
    for (int64_t ib = br0; ib < br1; ++ib) {                                                      \
        int64_t b = bptr[ib];                                                                     \
        if (pattern[ib]) {  /* one pattern: each run of a block column in the first row is a block */ \
            int64_t i0 = ib * R, p = indptr[i0], e = indptr[i0 + 1];                              \
            const int32_t same = i0 + R < M ? R : (int32_t)(M - i0);                              \
            for (int32_t r = 0; r < same; ++r) pos[r] = indptr[i0 + r] - p;                      \
            while (p < e) {                                                                       \
                T *blk = data + b * rc;                                                           \
                int32_t k0 = indices[p] / C, c0 = k0 * C;                                         \
                bcol[b++] = k0;                                                                   \
                if (same == R && p + C <= e && indices[p] == c0 && indices[p + C - 1] == c0 + C - 1) { \
                    /* a dense block (C sorted distinct columns from c0): R rows of C values */   \
                    for (int32_t r = 0; r < R; ++r)                                               \
                        for (int32_t j = 0; j < C; ++j)                                           \
                            blk[(int64_t)r * C + j] = values[p + pos[r] + j];                     \
                    p += C;                                                                       \
                    continue;                                                                     \
                }                                                                                 \
                for (int64_t j = 0; j < rc; ++j) blk[j] = 0;                                      \
                if (same == R)                                                                    \
                    COPY_RUN(R);                                                                  \
                else                                                                              \
                    COPY_RUN(same);                                                               \
            }                                                                                     \
            continue;                                                                             \
        }                                                                                         \
        if (R == 2 && 2 * ib + 1 < M) {  /* both rows present */                                  \
            int64_t a0 = indptr[2 * ib], a1 = indptr[2 * ib + 1], a2 = indptr[2 * ib + 2];        \
            MERGE2(C, indices + a0, values + a0, a1 - a0, indices + a1, values + a1, a2 - a1,     \
                   bcol, data, b);                                                                \
            continue;                                                                             \
        }                                                                                         \
        int32_t nr = open_rows(R, C, M, indptr, indices, ib, pos, end, kk);                       \
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

FILL_IMPL(fill_impl_f32, float, merge2_f32)
FILL_IMPL(fill_impl_f64, double, merge2_f64)

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

/* Blocks of every block row ib in [br0, br1): counts[ib - br0], and pattern[ib] = whether its
 * rows share one pattern (the fill's input); 0, or -1 when out of memory. */
int tvmext_bcsr_count(int32_t R, int32_t C, int32_t M, int32_t K, const int32_t *indptr,
                      const int32_t *indices, int64_t br0, int64_t br1, int64_t *counts, uint8_t *pattern) {
    int rc = 0;
#define COUNT(W) rc = count_impl(R, W, M, K, indptr, indices, br0, br1, counts, pattern)
    BY_WIDTH(COUNT)
    return rc;
}

/* bcol and data of the blocks of block rows [br0, br1); block row ib starts at bptr[ib];
 * pattern: tvmext_bcsr_count's. */
void tvmext_bcsr_fill_f32(int32_t R, int32_t C, int32_t M, const int32_t *indptr, const int32_t *indices,
                          const float *values, int64_t br0, int64_t br1, const int64_t *bptr,
                          int32_t *bcol, float *data, const uint8_t *pattern) {
#define FILL32_RC(H, W) fill_impl_f32(H, W, M, indptr, indices, values, br0, br1, bptr, bcol, data, pattern)
#define FILL32(W) BY_HEIGHT(FILL32_RC, W)
    BY_WIDTH(FILL32)
}

void tvmext_bcsr_fill_f64(int32_t R, int32_t C, int32_t M, const int32_t *indptr, const int32_t *indices,
                          const double *values, int64_t br0, int64_t br1, const int64_t *bptr,
                          int32_t *bcol, double *data, const uint8_t *pattern) {
#define FILL64_RC(H, W) fill_impl_f64(H, W, M, indptr, indices, values, br0, br1, bptr, bcol, data, pattern)
#define FILL64(W) BY_HEIGHT(FILL64_RC, W)
    BY_WIDTH(FILL64)
}

/* Occupied diagonals of rows [r0, r1): mark[col - i + M - 1] = 1 for every non-zero (the
 * selector's DIA features; one pass, no per-non-zero index array).  mark has M + K - 1 bytes and
 * need not be zeroed: the call zeroes the window of its rows' diagonals first, bytes
 * [summary[0] + M - 1, summary[1] + M - 1], and touches no other byte (a banded matrix's window is
 * its band: a fresh mark array is not paged in beyond it).
 * Returns the diagonals this call marked first; once that passes limit (> 0) it stops marking:
 * the matrix has more than limit diagonals, and the marks are incomplete.  The rows' summary,
 * from every row (marked or not) in one pass over the row pointers, before the marks: summary[0]
 * and summary[1] the smallest and largest col - i (sorted rows give them from each row's first
 * and last column; 0 and 0 when all are empty, and nothing is marked), then the row lengths'
 * smallest, largest, sum, sum of squares and the empty rows (summary[2..6]; the smallest is
 * INT64_MAX for no rows). */
int64_t tvmext_mark_diagonals(int32_t M, const int32_t *indptr, const int32_t *indices, int64_t r0,
                              int64_t r1, uint8_t *mark, int64_t limit, int64_t *summary) {
    int64_t found = 0, lo = INT64_MAX, hi = INT64_MIN;
    int64_t shortest = INT64_MAX, longest = 0, sum = 0, squares = 0, empty = 0;
    for (int64_t j = r0; j < r1; ++j) {
        int64_t len = (int64_t)indptr[j + 1] - indptr[j];
        shortest = len < shortest ? len : shortest;
        longest = len > longest ? len : longest;
        sum += len;
        squares += len * len;
        empty += len == 0;
        if (len > 0) {
            int64_t first = (int64_t)indices[indptr[j]] - j, last = (int64_t)indices[indptr[j + 1] - 1] - j;
            lo = first < lo ? first : lo;
            hi = last > hi ? last : hi;
        }
    }
    summary[0] = lo == INT64_MAX ? 0 : lo;
    summary[1] = hi == INT64_MIN ? 0 : hi;
    summary[2] = shortest;
    summary[3] = longest;
    summary[4] = sum;
    summary[5] = squares;
    summary[6] = empty;
    if (lo == INT64_MAX)
        return 0;
    memset(mark + (lo + M - 1), 0, (size_t)(hi - lo + 1));
    for (int64_t i = r0; i < r1 && !(limit > 0 && found > limit); ++i) {
        uint8_t *row = mark + (M - 1 - i);
        for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p) {
            found += !row[indices[p]];
            row[indices[p]] = 1;
        }
    }
    return found;
}

/* The selector's sampled block fill (tvm_ext.workloads.stats.estimate_block_fill): for the
 * block rows picked[0..n) of R rows each (ascending; the last may be ragged) and every block
 * width widths[w], out[w * n + p] = the distinct col / widths[w] of block row picked[p].  A row
 * with the columns of the row before it adds no block column and is skipped (the unknowns of
 * one FEM node share a pattern: a 3-dof mesh's 8-row block rows read 3 distinct rows, not 8);
 * when every row after the first repeats (one pattern) the count is the runs of the first row,
 * else the count pass's marks (one int32 per column, tagged per (width, block row); the first
 * non-zero of each run of one block column in a row reads and writes them).  The repeat flags
 * (one byte per sampled row) are found once for all widths.  0, or -1 when the marks or flags
 * could not be allocated. */
#define SAMPLED_COUNT(W)                                                                          \
    for (int64_t p = 0; p < n; ++p) {                                                             \
        const int32_t tag = (int32_t)(base + p + 1);                                              \
        const uint8_t *skip = repeat + p * R;                                                     \
        int64_t i0 = picked[p] * R, i1 = i0 + R < M ? i0 + R : M, cnt = 0;                        \
        if (same[p]) i1 = i0 + 1;                                                                 \
        for (int64_t i = i0; i < i1; ++i) {                                                       \
            if (skip[i - i0]) continue;                                                           \
            int32_t prev = -1;                                                                    \
            for (int64_t q = indptr[i]; q < indptr[i + 1]; ++q) {                                 \
                int32_t kk = indices[q] / (W);                                                    \
                if (kk != prev) {                                                                 \
                    cnt += same[p] || mark[kk] != tag;                                            \
                    mark[kk] = tag;                                                               \
                    prev = kk;                                                                    \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
        out[w * n + p] = cnt;                                                                     \
    }

int tvmext_sampled_block_counts(int32_t R, int32_t M, int32_t K, const int64_t *indptr,
                                const int32_t *indices, const int64_t *picked, int64_t n,
                                const int32_t *widths, int32_t nw, int64_t *out) {
    int32_t *mark = (int32_t *)calloc((size_t)(K > 0 ? K : 1) + 1, sizeof(int32_t));
    uint8_t *same = (uint8_t *)malloc((size_t)(n > 0 ? n : 1));
    uint8_t *repeat = (uint8_t *)calloc((size_t)(n > 0 ? n : 1) * (size_t)(R > 0 ? R : 1), 1);
    if (!mark || !same || !repeat) {
        free(mark);
        free(same);
        free(repeat);
        return -1;
    }
    for (int64_t p = 0; p < n; ++p) {
        int64_t i0 = picked[p] * R, i1 = i0 + R < M ? i0 + R : M;
        uint8_t all = 1;
        for (int64_t i = i0 + 1; i < i1; ++i) {
            repeat[p * R + (i - i0)] = (uint8_t)repeats_previous_row(indptr, indices, i);
            all &= repeat[p * R + (i - i0)];
        }
        same[p] = all;
    }
    int64_t base = 0;
    for (int32_t w = 0; w < nw; ++w, base += n) {
        if (base + n >= INT32_MAX) {  /* tags would wrap: start the marks afresh */
            memset(mark, 0, ((size_t)(K > 0 ? K : 1) + 1) * sizeof(int32_t));
            base = 0;
        }
        const int32_t C = widths[w];
        switch (C) {
        case 1: SAMPLED_COUNT(1) break;
        case 2: SAMPLED_COUNT(2) break;
        case 3: SAMPLED_COUNT(3) break;
        case 4: SAMPLED_COUNT(4) break;
        case 6: SAMPLED_COUNT(6) break;
        case 8: SAMPLED_COUNT(8) break;
        default: SAMPLED_COUNT(C)
        }
    }
    free(mark);
    free(same);
    free(repeat);
    return 0;
}

/* Row-major ELL of width W for rows [r0, r1) (Fig. 5.6's compact-and-pad: entry j of row i at
 * [i, j - indptr[i]]): each row's columns and values copied, its pad slots given the row's last
 * column (0 for an empty row) and a zero value, so a pad reads a B row the row already reads. */
#define ELL_IMPL(NAME, T)                                                                         \
void NAME(int32_t W, const int32_t *indptr, const int32_t *indices, const T *values, int64_t r0,  \
          int64_t r1, int32_t *col, T *data) {                                                    \
    for (int64_t i = r0; i < r1; ++i) {                                                           \
        int64_t p = indptr[i], n = indptr[i + 1] - p;                                             \
        int32_t *c = col + i * (int64_t)W;                                                        \
        T *d = data + i * (int64_t)W;                                                             \
        memcpy(c, indices + p, (size_t)n * sizeof(int32_t));                                      \
        memcpy(d, values + p, (size_t)n * sizeof(T));                                             \
        int32_t pad = n > 0 ? indices[p + n - 1] : 0;                                             \
        for (int64_t j = n; j < W; ++j) {                                                         \
            c[j] = pad;                                                                           \
            d[j] = 0;                                                                             \
        }                                                                                         \
    }                                                                                             \
}

ELL_IMPL(tvmext_ell_fill_f32, float)
ELL_IMPL(tvmext_ell_fill_f64, double)

/* The BCSR passes on TVM's own thread pool: launch (TVMBackendParallelLaunch, its address passed
 * by the caller, so this library needs no TVM at link time) runs run_parts on every pool thread
 * (num_task 0: all of them, the calling thread as task 0), and each claims the next of the
 * nparts ranges [cuts[i], cuts[i + 1]) until none is left.  Right after a kernel, TVM's workers
 * spin waiting for work: threads of another pool would share the cores with them, while these
 * take the work at once. */
typedef struct { void *sync_handle; int32_t num_task; } tvm_group_env;
typedef int (*tvm_lambda)(int task_id, tvm_group_env *env, void *cdata);
typedef int (*tvm_launch)(tvm_lambda flambda, void *cdata, int num_task);

typedef struct {
    int fill;  /* 0: tvmext_bcsr_count, 4 or 8: tvmext_bcsr_fill_f32 or _f64 */
    int32_t R, C, M, K;
    const int32_t *indptr, *indices;
    const void *values;
    int64_t nparts;
    const int64_t *cuts;
    int64_t *counts;
    uint8_t *pattern;
    const int64_t *bptr;
    int32_t *bcol;
    void *data;
    _Atomic int64_t next;
    _Atomic int status;
} bcsr_job;

static int run_parts(int task_id, tvm_group_env *env, void *cdata) {
    (void)task_id;
    (void)env;
    bcsr_job *j = (bcsr_job *)cdata;
    for (int64_t i = j->next++; i < j->nparts; i = j->next++) {
        int64_t a = j->cuts[i], b = j->cuts[i + 1];
        if (j->fill == 0) {
            if (tvmext_bcsr_count(j->R, j->C, j->M, j->K, j->indptr, j->indices, a, b, j->counts + a, j->pattern))
                j->status = -1;
        } else if (j->fill == 4) {
            tvmext_bcsr_fill_f32(j->R, j->C, j->M, j->indptr, j->indices, (const float *)j->values, a, b, j->bptr,
                                 j->bcol, (float *)j->data, j->pattern);
        } else {
            tvmext_bcsr_fill_f64(j->R, j->C, j->M, j->indptr, j->indices, (const double *)j->values, a, b, j->bptr,
                                 j->bcol, (double *)j->data, j->pattern);
        }
    }
    return 0;
}

/* tvmext_bcsr_count over the nparts ranges on TVM's pool (counts has one entry per block row);
 * 0, -1 when a part could not allocate its marks, -2 when the launch failed. */
int tvmext_bcsr_count_pool(void *launch, int64_t nparts, const int64_t *cuts, int32_t R, int32_t C, int32_t M,
                           int32_t K, const int32_t *indptr, const int32_t *indices, int64_t *counts,
                           uint8_t *pattern) {
    bcsr_job j = {0, R, C, M, K, indptr, indices, NULL, nparts, cuts, counts, pattern, NULL, NULL, NULL, 0, 0};
    if (((tvm_launch)launch)(run_parts, &j, 0) != 0) return -2;
    return j.status;
}

/* tvmext_bcsr_fill_f32 (itemsize 4) or _f64 (8) over the nparts ranges on TVM's pool; 0, or -2
 * when the launch failed. */
int tvmext_bcsr_fill_pool(void *launch, int32_t itemsize, int64_t nparts, const int64_t *cuts, int32_t R,
                          int32_t C, int32_t M, const int32_t *indptr, const int32_t *indices, const void *values,
                          const int64_t *bptr, int32_t *bcol, void *data, const uint8_t *pattern) {
    bcsr_job j = {itemsize, R, C, M, 0, indptr, indices, values, nparts, cuts, NULL, (uint8_t *)pattern, bptr,
                  bcol, data, 0, 0};
    return ((tvm_launch)launch)(run_parts, &j, 0) != 0 ? -2 : 0;
}
