/*
 * config_parse.c - the configuration parser's machinery (config_int.h):
 * the JSON path of the value being read ("namespaces[1].window_sizes[0]"),
 * failing there with a message, values quoted for humans, the typed value
 * readers, and key tables applied to an object, an unknown key answered
 * with "did you mean" or the list of known keys. What the keys mean is in
 * config_keys.c and config_ns.c.
 */
#include "agent/config_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Where we are in the document, where errors go.
 */

void cfg_parser_init(struct cfg_parser *p, struct config_err *err)
{
	p->err = err;
	p->ns_replaced = false;
	p->len = 0;
	p->path[0] = '\0';
}

/* Appends a component to the path and returns the length before it, for
 * cfg_path_pop(). A path too long for err->path is cut: it is for humans. */
__attribute__((format(printf, 2, 3)))
size_t cfg_path_push(struct cfg_parser *p, const char *fmt, ...)
{
	size_t mark = p->len;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(p->path + p->len, sizeof(p->path) - p->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		p->len += (size_t)n;
	if (p->len >= sizeof(p->path))
		p->len = sizeof(p->path) - 1;
	return mark;
}

size_t cfg_path_key(struct cfg_parser *p, const char *key)
{
	return p->len ? cfg_path_push(p, ".%s", key) : cfg_path_push(p, "%s", key);
}

void cfg_path_pop(struct cfg_parser *p, size_t mark)
{
	p->len = mark;
	p->path[mark] = '\0';
}

/* Fills err with the current path and the message; returns -1. */
__attribute__((format(printf, 2, 3)))
int cfg_fail(struct cfg_parser *p, const char *fmt, ...)
{
	va_list ap;

	memcpy(p->err->path, p->path, p->len + 1);
	va_start(ap, fmt);
	vsnprintf(p->err->msg, sizeof(p->err->msg), fmt, ap);
	va_end(ap);
	return -1;
}

/* s[0..n) in double quotes, cut to fit, unprintable bytes as '?'. */
void cfg_quote(const char *s, size_t n, char *buf, size_t len)
{
	size_t i, o = 0, room = len - 5;   /* quotes, "...", NUL */

	buf[o++] = '"';
	for (i = 0; i < n && i < room - 1; i++) {
		unsigned char ch = (unsigned char)s[i];

		buf[o++] = (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') ? '?' : (char)ch;
	}
	if (i < n) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o++] = '"';
	buf[o] = '\0';
}

/* What a JSON value is, for "expected X, got Y": its type, and the value
 * itself when it is a scalar. */
static void cfg_show(const json_t *v, char *buf, size_t len)
{
	char q[CFG_SHOW_MAX];

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		snprintf(buf, len, "an object");
		break;
	case JSON_ARRAY:
		snprintf(buf, len, "an array");
		break;
	case JSON_STRING:
		cfg_quote(json_string_value(v), json_string_length(v), q, sizeof(q));
		snprintf(buf, len, "string %s", q);
		break;
	case JSON_INTEGER:
		snprintf(buf, len, "integer %lld", (long long)json_integer_value(v));
		break;
	case JSON_REAL:
		snprintf(buf, len, "real %g", json_real_value(v));
		break;
	case JSON_TRUE:
		snprintf(buf, len, "true");
		break;
	case JSON_FALSE:
		snprintf(buf, len, "false");
		break;
	case JSON_NULL:
	default:
		snprintf(buf, len, "null");
		break;
	}
}

/* "expected <what>, got <v>". Returns -1. */
int cfg_fail_type(struct cfg_parser *p, const json_t *v, const char *what)
{
	char got[CFG_SHOW_MAX + 16];

	cfg_show(v, got, sizeof(got));
	return cfg_fail(p, "expected %s, got %s", what, got);
}

/* `"a", "b" or "c"` into buf. */
void cfg_list_names(const char *const *names, size_t n, char *buf, size_t len)
{
	size_t i, o = 0;

	buf[0] = '\0';
	for (i = 0; i < n && o < len; i++) {
		const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
		int k = snprintf(buf + o, len - o, "%s\"%s\"", sep, names[i]);

		if (k < 0)
			break;
		o += (size_t)k;
	}
}

/* ------------------------------------------------------------------------
 * Value readers: each checks one JSON value at the current path.
 */

/* An integer in lo..hi. */
int cfg_want_int(struct cfg_parser *p, const json_t *v, long long lo, long long hi,
		 long long *out)
{
	long long x = 0;

	if (!json_is_integer(v)) {
		char what[64];

		snprintf(what, sizeof(what), "an integer in %lld..%lld", lo, hi);
		return cfg_fail_type(p, v, what);
	}
	x = (long long)json_integer_value(v);
	if (x < lo || x > hi)
		return cfg_fail(p, "expected an integer in %lld..%lld, got %lld", lo, hi, x);
	*out = x;
	return 0;
}

/* One of names[0..n); *out = its index. */
int cfg_want_enum(struct cfg_parser *p, const json_t *v, const char *const *names, size_t n,
		  int *out)
{
	char what[128];
	size_t i;

	if (json_is_string(v)) {
		for (i = 0; i < n; i++) {
			if (strcmp(json_string_value(v), names[i]) == 0) {
				*out = (int)i;
				return 0;
			}
		}
	}
	memcpy(what, "one of ", 7);
	cfg_list_names(names, n, what + 7, sizeof(what) - 7);
	return cfg_fail_type(p, v, what);
}

/* ------------------------------------------------------------------------
 * Key tables.
 */

/* Levenshtein distance, for "did you mean"; large for long strings. */
static size_t cfg_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j;
	size_t row[64], diag, up;

	if (la >= 64 || lb >= 64)
		return SIZE_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			size_t best = diag + (a[i - 1] != b[j - 1]);

			up = row[j];
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			diag = up;
			row[j] = best;
		}
	}
	return row[lb];
}

/* The name key k has in the object at path[0..at): its own, or for
 * "obj.name" (agent/fronts.h: a front's address inside an object) "name"
 * inside the top-level obj only; NULL elsewhere. */
static const char *cfg_key_here(const struct cfg_parser *p, size_t at, const struct cfg_key *k)
{
	const char *dot = strchr(k->name, '.');
	size_t n;

	if (!dot)
		return k->name;
	n = (size_t)(dot - k->name);
	return at == n && memcmp(p->path, k->name, n) == 0 ? dot + 1 : NULL;
}

/* key is not one of keys[0..n) in the object at path[0..at). */
static int cfg_unknown_key(struct cfg_parser *p, size_t at, const struct cfg_key *keys, size_t n,
			   const char *key)
{
	const char *best = NULL, *name;
	size_t best_d = SIZE_MAX, i, o = 0;
	char q[CFG_SHOW_MAX], known[400];

	cfg_quote(key, strlen(key), q, sizeof(q));
	for (i = 0; i < n; i++) {
		if (!(name = cfg_key_here(p, at, &keys[i])))
			continue;
		size_t d = cfg_distance(key, name);

		if (d < best_d) {
			best_d = d;
			best = name;
		}
	}
	if (best && best_d <= 2 && best_d < strlen(key))
		return cfg_fail(p, "unknown key %s (did you mean \"%s\"?)", q, best);
	known[0] = '\0';
	for (i = 0; i < n && o < sizeof(known); i++) {
		if (!(name = cfg_key_here(p, at, &keys[i])))
			continue;
		int k = snprintf(known + o, sizeof(known) - o, "%s%s", o ? ", " : "", name);

		if (k < 0)
			break;
		o += (size_t)k;
	}
	return cfg_fail(p, "unknown key %s; known keys: %s", q, known);
}

/* Applies every key of obj through the table; the first unknown key or
 * bad value fails. */
/* v into the target's field as key k says (struct cfg_key). */
static int cfg_set_key(struct cfg_parser *p, const struct cfg_key *k, json_t *v, void *target)
{
	unsigned char *field = (unsigned char *)target + k->off;
	long long x = 0;

	switch (k->kind) {
	case CFG_KEY_OWN:
		return k->set(p, v, target);
	case CFG_KEY_FLAG:
		if (!json_is_boolean(v))
			return cfg_fail_type(p, v, "true or false");
		_Static_assert(sizeof(bool) == 1, "flags are one byte");
		*field = json_is_true(v);
		return 0;
	case CFG_KEY_INT:
		if (cfg_want_int(p, v, k->lo, k->hi, &x) < 0)
			return -1;
		/* Fields of 8 bytes (size_t) or 4 (int, unsigned, uint32_t:
		 * lo >= 0, so the bytes are the same). */
		if (k->size == sizeof(uint64_t)) {
			uint64_t u = (uint64_t)x;
			memcpy(field, &u, sizeof(u));
		} else if (k->size == sizeof(uint32_t) && k->lo >= 0) {
			uint32_t u = (uint32_t)x;
			memcpy(field, &u, sizeof(u));
		} else {
			return cfg_fail(p, "internal: no integer field of %zu bytes", k->size);
		}
		return 0;
	}
	return -1;
}

int cfg_parse_object(struct cfg_parser *p, json_t *obj, const struct cfg_key *keys, size_t n,
		     void *target)
{
	const char *key;
	json_t *v;

	json_object_foreach(obj, key, v) {
		size_t at = p->len, mark = cfg_path_key(p, key), i;
		const char *name;

		for (i = 0; i < n; i++)
			if ((name = cfg_key_here(p, at, &keys[i])) && strcmp(key, name) == 0)
				break;
		if (i == n)
			return cfg_unknown_key(p, at, keys, n, key);
		if (cfg_set_key(p, &keys[i], v, target) < 0)
			return -1;
		cfg_path_pop(p, mark);
	}
	return 0;
}

