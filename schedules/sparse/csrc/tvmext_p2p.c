/* Point-to-point wait/notify for the wavefront executors (schedules/sparse/p2p.py).
 *
 * TIR has no atomics and no way to wait, so the TIR kernel calls these two
 * functions through T.call_extern.  Each thread of the executor publishes how
 * many of its rows are finished in its own 64-byte slot of `progress`
 * (word 0 of the slot); a row that reads a value produced by another thread
 * first waits until that thread's count reaches the row's need.  This is
 * SpMP's post-and-wait (SPMP_LEVEL_SCHEDULE_WAIT/NOTIFY, Venkat 2016 Fig. 7.2).
 *
 * The wait spins for a bounded time (`tvmext_p2p_spin_ns`, a few tens of
 * microseconds: the producer is normally running and about to finish its
 * task; every 256 pauses it yields to a thread queued on its core), then blocks in the kernel on a futex on the producer's count word
 * (Linux; sched_yield elsewhere).  Blocking matters when the cores are
 * oversubscribed (more runnable threads than cores): a spinning waiter would
 * burn the time slice its producer needs.  Before blocking, the waiter sets
 * the slot's `sleepers` word (word 1); `notify` stores the count, then wakes
 * the futex only if that word is set, so a run with no sleepers makes no
 * system call.  Both sides use sequentially consistent accesses (store own
 * word, then load the other's), so either the waiter sees the new count or
 * the notifier sees the sleeper; the futex itself re-checks the count, so a
 * wake that comes before the waiter sleeps is not lost.  Sleeps are bounded
 * (1 ms) and re-check everything, so no schedule of events can strand a
 * waiter.
 *
 * `fence` is the TIR buffer the caller is about to read or has just written:
 * passing it keeps the compiler from moving those accesses across the call.
 * A wait that makes no progress for `timeout_ms` (a thread that never ran:
 * nested parallelism, a too-small thread pool) sets `*failed` and returns 1
 * instead of hanging; every later wait then returns at once and the caller
 * raises an error.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define SLOT 16 /* int32 per slot: one 64-byte cache line per thread */
#define SLEEPERS 1 /* word of the slot that says "a waiter may be asleep on word 0" */

/* Spin budget of a wait before it blocks, in nanoseconds (0: block at once).
 * The benchmark sets it to compare policies; see tvmext_p2p_set_spin_ns. */
static _Atomic int64_t tvmext_p2p_spin_ns = 50000;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Sleep until *word may differ from `seen` (or about 1 ms passed). */
static void block_on(_Atomic int32_t *word, int32_t seen) {
#if defined(__linux__)
    struct timespec ts = {0, 1000000};
    syscall(SYS_futex, (int32_t *)word, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
#else
    (void)word;
    (void)seen;
    sched_yield();
#endif
}

static void wake_all(_Atomic int32_t *word) {
#if defined(__linux__)
    syscall(SYS_futex, (int32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)word;
#endif
}

int64_t tvmext_p2p_set_spin_ns(int64_t ns) {
    /* returns the previous budget; a negative value only reads it */
    if (ns < 0) return atomic_load(&tvmext_p2p_spin_ns);
    return atomic_exchange(&tvmext_p2p_spin_ns, ns);
}

int32_t tvmext_p2p_wait(int32_t *progress, int32_t thread, int32_t need, int32_t *failed,
                        int32_t timeout_ms, void *fence) {
    (void)fence;
    _Atomic int32_t *p = (_Atomic int32_t *)(progress + (int64_t)thread * SLOT);
    _Atomic int32_t *sleepers = p + SLEEPERS;
    if (atomic_load_explicit(p, memory_order_acquire) >= need) return 0;
    _Atomic int32_t *f = (_Atomic int32_t *)failed;
    const int64_t spin = atomic_load_explicit(&tvmext_p2p_spin_ns, memory_order_relaxed);
    const int64_t start = now_ns();
    /* spin: the producer is most likely running and about to publish */
    for (uint32_t k = 1;; ++k) {
        if (atomic_load_explicit(p, memory_order_acquire) >= need) return 0;
        if ((k & 255) == 0) {
            if (atomic_load_explicit(f, memory_order_relaxed)) return 1;
            if (now_ns() - start >= spin) break;
            sched_yield();  /* lets a thread queued on this core (the producer?) run */
        } else {
            cpu_relax();
        }
    }
    /* block: announce a sleeper, re-check, sleep on the count word */
    for (;;) {
        atomic_store(sleepers, 1);
        int32_t seen = atomic_load(p);
        if (seen >= need) return 0;
        if (atomic_load_explicit(f, memory_order_relaxed)) return 1;
        if (now_ns() - start > (int64_t)timeout_ms * 1000000LL) {
            atomic_store_explicit(f, 1, memory_order_relaxed);
            wake_all(p);  /* nobody else should sleep through the failure */
            return 1;
        }
        block_on(p, seen);
    }
}

int32_t tvmext_p2p_notify(int32_t *progress, int32_t thread, int32_t count, void *fence) {
    (void)fence;
    _Atomic int32_t *p = (_Atomic int32_t *)(progress + (int64_t)thread * SLOT);
    _Atomic int32_t *sleepers = p + SLEEPERS;
    atomic_store(p, count);
    if (atomic_load(sleepers)) {
        atomic_store(sleepers, 0);
        wake_all(p);
    }
    return 0;
}

/* Atomic fetch-and-add on base[index]; returns the old value.  The parallel
 * level-set inspector (schedules/sparse/level_sets.py, SpMP's parallel BFS)
 * lowers in-degrees and appends to the next frontier with it. */
int32_t tvmext_atomic_add(int32_t *base, int32_t index, int32_t delta) {
    return atomic_fetch_add_explicit((_Atomic int32_t *)(base + index), delta,
                                     memory_order_acq_rel);
}
