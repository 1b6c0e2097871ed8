/*
 * guard.h - a guard page for tests of decoders (tests/test_spop_*.c): the
 * bytes under test placed right before a PROT_NONE page, so that reading
 * one byte too far crashes the test instead of passing silently. The
 * mapping comes from agent/segment.h, the one caller of mmap.
 *
 * Calls Criterion's assertions: for test binaries only.
 */
#ifndef TESTS_GUARD_H
#define TESTS_GUARD_H

#include <criterion/criterion.h>

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent/segment.h"

struct guard {
	uint8_t *base;
	size_t size;
	uint8_t *limit;   /* first byte of the PROT_NONE page */
};

/* Room for max bytes before the guard page (asserted). */
static inline void guard_init(struct guard *g, size_t max)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t data = (max + pg - 1) / pg * pg;

	if (data == 0)
		data = pg;
	g->size = data + pg;
	g->base = segment_new(g->size);
	cr_assert_not_null(g->base);
	cr_assert_eq(mprotect(g->base + data, pg, PROT_NONE), 0);
	g->limit = g->base + data;
}

static inline void guard_fini(struct guard *g)
{
	segment_free(g->base, g->size);
}

/* Copies n bytes of src so that they end exactly at the guard page;
 * returns where they start. */
static inline const uint8_t *guard_put(struct guard *g, const void *src, size_t n)
{
	uint8_t *p = g->limit - n;

	if (n)
		memcpy(p, src, n);
	return p;
}

/* The bytes of src placed right before a guard page of the test process's
 * own (made at the first call, GUARD_AT_MAX bytes of room), for decoders
 * fed one input after another; memmove: src may be guarded bytes too. */
#define GUARD_AT_MAX (2u * 1024u * 1024u)
static inline const uint8_t *guard_at(const void *src, size_t n)
{
	static struct guard g;

	if (!g.base)
		guard_init(&g, GUARD_AT_MAX);
	cr_assert(n <= GUARD_AT_MAX);
	if (n)
		memmove(g.limit - n, src, n);
	return g.limit - n;
}

#endif /* TESTS_GUARD_H */
