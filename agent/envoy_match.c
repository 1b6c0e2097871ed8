/*
 * envoy_match.c - the descriptor trees of envoyproxy/ratelimit's
 * configuration and their matcher (see envoy_match.h). Allocation happens
 * only while a domain is built; envoy_match() and envoy_match_key() read
 * the tree and write the caller's memory only.
 */
#include "agent/envoy_match.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t envoy_unit_seconds(int unit)
{
	switch (unit) {
	case RLS_UNIT_SECOND: return 1;
	case RLS_UNIT_MINUTE: return 60;
	case RLS_UNIT_HOUR:   return 3600;
	case RLS_UNIT_DAY:    return 86400;
	case RLS_UNIT_WEEK:   return 7 * 86400;
	case RLS_UNIT_MONTH:  return 30 * 86400;
	case RLS_UNIT_YEAR:   return 365 * 86400;
	default:              return 0;
	}
}

enum rls_unit envoy_unit_of_window(uint32_t window)
{
	for (int u = RLS_UNIT_SECOND; u <= RLS_UNIT_WEEK; u++)
		if (envoy_unit_seconds(u) == window)
			return (enum rls_unit)u;
	return RLS_UNIT_UNKNOWN;
}

/* ---- building ---- */

struct envoy_domain *envoy_domain_new(const char *name, size_t len)
{
	struct envoy_domain *d = calloc(1, sizeof(*d));

	if (!d || !(d->name = malloc(len + 1))) {
		free(d);
		return NULL;
	}
	memcpy(d->name, name, len);
	d->name[len] = '\0';
	d->root.name = d->name;
	d->root.name_len = len;
	return d;
}

static void envoy_node_free(struct envoy_node *n)
{
	for (size_t i = 0; i < n->n_children; i++) {
		struct envoy_node *c = n->children[i];

		envoy_node_free(c);
		free(c->name);
		free((void *)c->limit.name);
		for (size_t j = 0; j < c->limit.n_replaces; j++)
			free((void *)c->limit.replaces[j]);
		free((void *)c->limit.replaces);
		free(c);
	}
	free(n->children);
	free(n->wild);
}

void envoy_domain_free(struct envoy_domain *d)
{
	if (!d)
		return;
	envoy_node_free(&d->root);
	for (size_t i = 0; i < d->n_files; i++)
		free(d->files[i]);
	free(d->files);
	free(d->name);
	free(d);
}

/* Room for one more pointer in *arr (of *n, *cap). */
static int envoy_grow(void *arr, size_t n, size_t *cap)
{
	void **a = *(void ***)arr;

	if (n < *cap)
		return 0;
	size_t c = *cap ? 2 * *cap : 4;
	a = realloc(a, c * sizeof(*a));
	if (!a)
		return -1;
	*(void ***)arr = a;
	*cap = c;
	return 0;
}

int envoy_domain_add_file(struct envoy_domain *d, const char *file)
{
	size_t cap = d->n_files;
	char *copy = strdup(file);

	if (!copy || envoy_grow(&d->files, d->n_files, &cap) < 0) {
		free(copy);
		return -1;
	}
	d->files[d->n_files] = copy;
	return (int)d->n_files++;
}

static char *envoy_strdup0(const char *s)
{
	return strdup(s ? s : "");
}

/* A copy of l's strings into n's limit. */
static int envoy_limit_copy(struct envoy_node *n, const struct envoy_limit *l)
{
	const char **r = NULL;

	n->limit = *l;
	n->limit.name = NULL;
	n->limit.replaces = NULL;
	n->limit.n_replaces = 0;
	if (!(n->limit.name = envoy_strdup0(l->name)))
		return -1;
	if (l->n_replaces && !(r = calloc(l->n_replaces, sizeof(*r))))
		return -1;
	n->limit.replaces = r;
	for (size_t i = 0; i < l->n_replaces; i++) {
		if (!(r[i] = envoy_strdup0(l->replaces[i])))
			return -1;
		n->limit.n_replaces = i + 1;
	}
	n->has_limit = true;
	return 0;
}

struct envoy_node *envoy_node_add(struct envoy_domain *d, struct envoy_node *parent,
				  const char *key, size_t key_len, const char *value,
				  size_t value_len, const struct envoy_limit *limit)
{
	struct envoy_node *n = calloc(1, sizeof(*n));
	size_t len = key_len + (value_len ? 1 + value_len : 0);

	if (!n || !(n->name = malloc(len + 1)) ||
	    envoy_grow(&parent->children, parent->n_children, &parent->cap_children) < 0) {
		if (n)
			free(n->name);
		free(n);
		return NULL;
	}
	memcpy(n->name, key, key_len);
	if (value_len) {
		n->name[key_len] = '_';
		memcpy(n->name + key_len + 1, value, value_len);
	}
	n->name[len] = '\0';
	n->name_len = len;
	n->key_len = key_len;
	n->wildcard = memchr(n->name, '*', len) != NULL;
	n->order = d->n_nodes++;
	/* In the tree from here on: freed with it, whatever fails below. */
	parent->children[parent->n_children++] = n;
	if (limit && envoy_limit_copy(n, limit) < 0)
		return NULL;
	if (n->wildcard) {
		if (envoy_grow(&parent->wild, parent->n_wild, &parent->cap_wild) < 0)
			return NULL;
		parent->wild[parent->n_wild++] = n;
	}
	return n;
}

/* Names in byte order, the shorter first on a common prefix. */
static int envoy_name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static int envoy_node_cmp(const void *x, const void *y)
{
	const struct envoy_node *a = *(struct envoy_node *const *)x;
	const struct envoy_node *b = *(struct envoy_node *const *)y;
	int c = envoy_name_cmp(a->name, a->name_len, b->name, b->name_len);

	return c ? c : (a->order > b->order) - (a->order < b->order);
}

/* The distinct windows of the limits below n (and the largest delay),
 * into w[0..*nw), counting past cap without storing. Sorts each level. */
static void envoy_sort_level(struct envoy_domain *d, struct envoy_node *n, uint32_t *w,
			     size_t cap, size_t *nw)
{
	if (n->n_children)
		qsort(n->children, n->n_children, sizeof(*n->children), envoy_node_cmp);
	for (size_t i = 0; i < n->n_children; i++) {
		const struct envoy_node *c = n->children[i];
		size_t k = 0;

		if (c->has_limit && !c->limit.unlimited) {
			while (k < *nw && k < cap && w[k] != c->limit.window)
				k++;
			if (k == *nw) {
				if (k < cap)
					w[k] = c->limit.window;
				(*nw)++;
			}
			if (c->limit.delay_max_ms > d->delay_max_ms)
				d->delay_max_ms = c->limit.delay_max_ms;
		}
		envoy_sort_level(d, n->children[i], w, cap, nw);
	}
}

/* The duplicate name below n that was written first (the later of its
 * pair: what envoyproxy/ratelimit stops at), its full name in best_path:
 * path[0..at) is n's. */
static void envoy_find_dup(const struct envoy_node *n, char *path, size_t pathlen, size_t at,
			   const struct envoy_node **dup, char *best_path)
{
	for (size_t i = 0; i < n->n_children; i++) {
		const struct envoy_node *c = n->children[i];
		int k = snprintf(path + at, pathlen - at, ".%s", c->name);
		size_t here = k < 0 || (size_t)k >= pathlen - at ? pathlen - 1 : at + (size_t)k;

		if (i > 0 && envoy_name_cmp(n->children[i - 1]->name, n->children[i - 1]->name_len,
					    c->name, c->name_len) == 0 &&
		    (!*dup || c->order < (*dup)->order)) {
			*dup = c;
			memcpy(best_path, path, here + 1);
		}
		envoy_find_dup(c, path, pathlen, here, dup, best_path);
	}
}

int envoy_domain_finish(struct envoy_domain *d, const struct envoy_node **dup, char *path,
			size_t pathlen)
{
	char scratch[512], best[512];
	uint32_t w[sizeof(d->windows) / sizeof(d->windows[0])];
	size_t nw = 0, cap = sizeof(w) / sizeof(w[0]);
	int k;

	*dup = NULL;
	d->delay_max_ms = 0;
	envoy_sort_level(d, &d->root, w, cap, &nw);
	k = snprintf(scratch, sizeof(scratch), "%s", d->name);
	envoy_find_dup(&d->root, scratch, sizeof(scratch),
		       k < 0 || (size_t)k >= sizeof(scratch) ? sizeof(scratch) - 1 : (size_t)k, dup,
		       best);
	if (*dup) {
		snprintf(path, pathlen, "%s", best);
		return -1;
	}
	if (nw > cap) {
		snprintf(path, pathlen, "%zu", nw);
		return -1;
	}
	memcpy(d->windows, w, nw * sizeof(w[0]));
	d->n_windows = nw;
	return 0;
}

/* ---- matching ---- */

/* The child of n named name[0..len), by binary search, or NULL. */
static const struct envoy_node *envoy_child(const struct envoy_node *n, const char *name,
					    size_t len)
{
	size_t lo = 0, hi = n->n_children;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct envoy_node *c = n->children[mid];
		int cmp = envoy_name_cmp(c->name, c->name_len, name, len);

		if (cmp == 0)
			return c;
		if (cmp < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const struct envoy_node *envoy_node_find(const struct envoy_node *parent, const char *name,
					 size_t len)
{
	return envoy_child(parent, name, len);
}

/* Does s[0..n) match pattern p[0..plen), '*' any run of bytes? As
 * envoyproxy/ratelimit's wildcardMatch: the first part a prefix, the last
 * a suffix, the middle ones found in order in between (first occurrence). */
static bool envoy_wild(const char *p, size_t plen, const char *s, size_t n)
{
	const char *star = memchr(p, '*', plen), *last;
	size_t first, lastlen, fixed = 0, at, end;

	if (!star)
		return plen == n && memcmp(p, s, n) == 0;
	first = (size_t)(star - p);
	last = (const char *)memrchr(p, '*', plen) + 1;
	lastlen = plen - (size_t)(last - p);
	for (size_t i = 0; i < plen; i++)
		fixed += p[i] != '*';
	if (n < fixed || memcmp(s, p, first) != 0 || memcmp(s + n - lastlen, last, lastlen) != 0)
		return false;
	at = first;
	end = n - lastlen;
	/* the middle parts, between the first '*' and the last */
	for (const char *q = star + 1; q < last;) {
		const char *next = memchr(q, '*', (size_t)(last - q));
		size_t len = (size_t)(next - q);
		const char *found;

		if (len) {
			found = memmem(s + at, end - at, q, len);
			if (!found)
				return false;
			at = (size_t)(found - s) + len;
		}
		q = next + 1;
	}
	return true;
}

bool envoy_match(const struct envoy_domain *d, const struct rls_entry *e, size_t n,
		 char *scratch, size_t cap, struct envoy_match *m)
{
	const struct envoy_node *node = &d->root;

	m->node = NULL;
	m->limit = NULL;
	for (size_t i = 0; i < ENVOY_DEPTH_MAX; i++)
		m->share[i] = (struct pb_str){ "", 0 };
	if (n == 0 || n > ENVOY_DEPTH_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		const struct envoy_node *next, *wild = NULL;
		size_t len = e[i].key.len + 1 + e[i].value.len;

		if (len > cap)
			return false;
		/* "key_value", as envoyproxy/ratelimit looks it up ("key_" too) */
		memcpy(scratch, e[i].key.ptr, e[i].key.len);
		scratch[e[i].key.len] = '_';
		memcpy(scratch + e[i].key.len + 1, e[i].value.ptr, e[i].value.len);
		next = envoy_child(node, scratch, len);
		for (size_t w = 0; !next && w < node->n_wild; w++)
			if (envoy_wild(node->wild[w]->name, node->wild[w]->name_len, scratch, len))
				next = wild = node->wild[w];
		if (!next)
			next = envoy_child(node, e[i].key.ptr, e[i].key.len);
		if (!next)
			return false;
		if (wild && wild->share_threshold) {
			/* the pattern without "key_", as the Go code trims it */
			size_t skip = wild->name_len > e[i].key.len &&
				      memcmp(wild->name, e[i].key.ptr, e[i].key.len) == 0 &&
				      wild->name[e[i].key.len] == '_' ? e[i].key.len + 1 : 0;
			m->share[i] = (struct pb_str){ wild->name + skip, wild->name_len - skip };
		}
		if (i == n - 1) {
			m->node = next;
			m->limit = next->has_limit ? &next->limit : NULL;
			return m->limit != NULL;
		}
		if (next->n_children == 0)
			return false;
		node = next;
	}
	return false;
}

/* Appends s[0..n) escaped ('%', '&', '=', control bytes as %XX). */
static bool envoy_key_put(char *out, size_t cap, size_t *o, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c == 0x7f || c == '%' || c == '&' || c == '=') {
			if (cap - *o < 3)
				return false;
			out[(*o)++] = '%';
			out[(*o)++] = hex[c >> 4];
			out[(*o)++] = hex[c & 15];
		} else {
			if (cap - *o < 1)
				return false;
			out[(*o)++] = (char)c;
		}
	}
	return true;
}

long envoy_match_key(const struct envoy_match *m, const struct rls_entry *e, size_t n,
		     char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		struct pb_str v = m && i < ENVOY_DEPTH_MAX && m->share[i].len ? m->share[i] : e[i].value;

		if (i) {
			if (o >= cap)
				return -1;
			out[o++] = '&';
		}
		if (!envoy_key_put(out, cap, &o, e[i].key.ptr, e[i].key.len) || o >= cap)
			return -1;
		out[o++] = '=';
		if (!envoy_key_put(out, cap, &o, v.ptr, v.len))
			return -1;
	}
	return (long)o;
}
