/*
 * atomics.h - the one header for every atomic that crosses a process
 * boundary (the shared counter table) and for the few helpers built on
 * C11 <stdatomic.h>: doubles kept as their IEEE-754 bits in an
 * _Atomic uint64_t (add by CAS loop, max, exchange), a monotonic max for
 * small counters, and the CPU's spin-wait hint.
 *
 * Why doubles as bits: costs may be decimal (0.5), C11 has no atomic
 * add for floating types that is guaranteed lock-free, and an
 * _Atomic uint64_t is. Every helper here is lock-free (asserted below), so
 * a process killed at any instant never leaves a lock behind: a CAS
 * either happened or it did not.
 *
 * Memory orders: the helpers take none and use relaxed ordering for the
 * counter words. Callers that publish data (slot identity) use explicit
 * acquire/release or seq_cst on the slot's meta word instead; a counter
 * word never publishes anything.
 */
#ifndef ATOMICS_H
#define ATOMICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Shared memory between processes is only safe with lock-free atomics: a
 * lock-based fallback would live in per-process memory (libatomic's lock
 * table) and not exclude the other processes. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "32-bit atomics must be lock-free");
_Static_assert(ATOMIC_SHORT_LOCK_FREE == 2, "16-bit atomics must be lock-free");
_Static_assert(sizeof(double) == sizeof(uint64_t), "double must be 64 bits");

/* The bits of a double and back (memcpy: the defined way to type-pun). */
static inline uint64_t atomics_dbits(double d)
{
	uint64_t u;

	memcpy(&u, &d, sizeof(u));
	return u;
}

static inline double atomics_bitsd(uint64_t u)
{
	double d;

	memcpy(&d, &u, sizeof(d));
	return d;
}

/* Reads a double stored as bits. */
static inline double atomics_load_double(const _Atomic uint64_t *p)
{
	return atomics_bitsd(atomic_load_explicit(p, memory_order_relaxed));
}

/* Stores a double as bits (only for words nobody else writes yet, e.g. a
 * slot being initialised). */
static inline void atomics_store_double(_Atomic uint64_t *p, double v)
{
	atomic_store_explicit(p, atomics_dbits(v), memory_order_relaxed);
}

/* Atomically *p += v; returns the new value. A CAS loop: under
 * contention a failed CAS reloads the current bits and retries, so no
 * concurrent addition is ever lost. */
static inline double atomics_add_double(_Atomic uint64_t *p, double v)
{
	uint64_t old = atomic_load_explicit(p, memory_order_relaxed);
	double nv;

	/* seq_cst on success (the same instruction as relaxed on x86): a
	 * caller's later seq_cst load of the slot's meta is ordered after the
	 * addition, which is how shm_count.c tells a hit that raced an eviction. */
	do {
		nv = atomics_bitsd(old) + v;
	} while (!atomic_compare_exchange_weak_explicit(p, &old, atomics_dbits(nv),
							memory_order_seq_cst,
							memory_order_relaxed));
	return nv;
}

/* Atomically *p += v only if *p + v + extra <= limit. Returns true if
 * added; *seen gets the value the decision was made on (before the
 * addition). The check and the addition are one CAS, so concurrent callers
 * can never push the sum past the limit together. */
static inline bool atomics_add_double_if(_Atomic uint64_t *p, double v, double extra,
					 double limit, double *seen)
{
	uint64_t old = atomic_load_explicit(p, memory_order_relaxed);

	for (;;) {
		double cur = atomics_bitsd(old);

		*seen = cur;
		if (cur + v + extra > limit)
			return false;
		if (atomic_compare_exchange_weak_explicit(p, &old, atomics_dbits(cur + v),
							  memory_order_seq_cst,
							  memory_order_relaxed))
			return true;
	}
}

/* Atomically *p = max(*p, v); returns the value left in *p. */
static inline double atomics_max_double(_Atomic uint64_t *p, double v)
{
	uint64_t old = atomic_load_explicit(p, memory_order_relaxed);

	for (;;) {
		double cur = atomics_bitsd(old);

		if (!(v > cur))
			return cur;
		if (atomic_compare_exchange_weak_explicit(p, &old, atomics_dbits(v),
							  memory_order_relaxed,
							  memory_order_relaxed))
			return v;
	}
}

/* Atomically replaces *p with v; returns the previous value. */
static inline double atomics_exchange_double(_Atomic uint64_t *p, double v)
{
	return atomics_bitsd(atomic_exchange_explicit(p, atomics_dbits(v),
						      memory_order_relaxed));
}

/* Raises *p to at least v (never lowers it), seq_cst so that it is ordered
 * before the caller's next seq_cst store (see shm_insert.c's insert protocol). */
static inline void atomics_raise_u16(_Atomic uint16_t *p, uint16_t v)
{
	uint16_t old = atomic_load(p);

	while (old < v && !atomic_compare_exchange_weak(p, &old, v))
		;
}

/* The CPU's "I am spinning" hint; a plain compiler barrier elsewhere. */
static inline void atomics_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ __volatile__("pause" ::: "memory");
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

#endif /* ATOMICS_H */
