/* Point-to-point wait/notify for the wavefront executors (schedules/sparse/p2p.py).
 *
 * TIR has no atomics and no way to wait, so the TIR kernel calls these two
 * functions through T.call_extern.  Each thread of the executor publishes how
 * many of its rows are finished in its own 64-byte slot of `progress`
 * (release store); a row that reads a value produced by another thread first
 * waits until that thread's count reaches the row's need (acquire load).  This
 * is SpMP's post-and-wait (SPMP_LEVEL_SCHEDULE_WAIT/NOTIFY, Venkat 2016 Fig. 7.2).
 *
 * `fence` is the TIR buffer the caller is about to read or has just written:
 * passing it keeps the compiler from moving those accesses across the call.
 * A wait that makes no progress for `timeout_ms` (a thread that never ran:
 * nested parallelism, a too-small thread pool) sets `*failed` and returns 1
 * instead of hanging; every later wait then returns at once and the caller
 * raises an error.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <sched.h>

#define SLOT 16 /* int32 per slot: one 64-byte cache line per thread */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

int32_t tvmext_p2p_wait(int32_t *progress, int32_t thread, int32_t need, int32_t *failed,
                        int32_t timeout_ms, void *fence) {
    (void)fence;
    _Atomic int32_t *p = (_Atomic int32_t *)(progress + (int64_t)thread * SLOT);
    if (atomic_load_explicit(p, memory_order_acquire) >= need) return 0;
    _Atomic int32_t *f = (_Atomic int32_t *)failed;
    double start = -1.0;
    for (uint64_t spin = 1;; ++spin) {
        if (atomic_load_explicit(p, memory_order_acquire) >= need) return 0;
        if (atomic_load_explicit(f, memory_order_relaxed)) return 1;
        if ((spin & 255) == 0) {
            /* a few microseconds of spinning: the other thread is probably not
               running (an oversubscribed machine), so give up the core */
            sched_yield();
            double t = now_ms();
            if (start < 0) start = t;
            else if (t - start > timeout_ms) {
                atomic_store_explicit(f, 1, memory_order_relaxed);
                return 1;
            }
        } else {
            cpu_relax();
        }
    }
}

int32_t tvmext_p2p_notify(int32_t *progress, int32_t thread, int32_t count, void *fence) {
    (void)fence;
    _Atomic int32_t *p = (_Atomic int32_t *)(progress + (int64_t)thread * SLOT);
    atomic_store_explicit(p, count, memory_order_release);
    return 0;
}

/* Atomic fetch-and-add on base[index]; returns the old value.  The parallel
 * level-set inspector (schedules/sparse/level_sets.py, SpMP's parallel BFS)
 * lowers in-degrees and appends to the next frontier with it. */
int32_t tvmext_atomic_add(int32_t *base, int32_t index, int32_t delta) {
    return atomic_fetch_add_explicit((_Atomic int32_t *)(base + index), delta,
                                     memory_order_acq_rel);
}
