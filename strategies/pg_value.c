/*
 * pg_value.c - values of the PostgreSQL strategy (strategies/pg_int.h):
 * every value travels as a bound parameter in binary format (arrays
 * included), so keys may hold any byte; results are requested in binary
 * too and their shape (column count, types, formats, lengths, NULLs) is
 * checked before anything is read. The writers and readers run per value:
 * they are static inline in pg_int.h; here, the checks of a result's
 * shape, error messages as one line, and the hashes of the tokens.
 */
#include <stdio.h>
#include <string.h>

#include "strategies/pg_int.h"

/* Copies the first line of msg (without a "ERROR:  " style severity,
 * trailing blanks trimmed) after prefix into dst[STRATEGY_ERR_MAX]. */
void pg_err_set(char dst[STRATEGY_ERR_MAX], const char *prefix, const char *msg)
{
	static const char *const sev[] = { "ERROR:  ", "FATAL:  ", "PANIC:  " };
	size_t n;

	if (!dst)
		return;
	if (!msg || !*msg)
		msg = "unknown error";
	for (size_t i = 0; i < sizeof(sev) / sizeof(sev[0]); i++)
		if (!strncmp(msg, sev[i], strlen(sev[i])))
			msg += strlen(sev[i]);
	n = strcspn(msg, "\r\n");
	while (n > 0 && (msg[n - 1] == ' ' || msg[n - 1] == '\t'))
		n--;
	snprintf(dst, STRATEGY_ERR_MAX, "%s%.*s", prefix ? prefix : "", (int)n, msg);
}

/* The error of a result: its primary message, else the whole message,
 * else the connection's. */
void pg_err_result(char dst[STRATEGY_ERR_MAX], const PGresult *r, PGconn *conn)
{
	const char *m = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;

	if (!m || !*m)
		m = r ? PQresultErrorMessage(r) : NULL;
	if ((!m || !*m) && conn)
		m = PQerrorMessage(conn);
	pg_err_set(dst, NULL, m);
}

/* Checks that r has exactly ncols binary columns of the given types.
 * Returns 0 or -1. */
int pg_check_cols(const PGresult *r, const Oid *types, int ncols)
{
	if (PQnfields(r) != ncols)
		return -1;
	for (int i = 0; i < ncols; i++)
		if (PQftype(r, i) != types[i] || PQfformat(r, i) != 1)
			return -1;
	return 0;
}

void pg_hash_bytes(uint64_t *h, const void *p, size_t n)
{
	const unsigned char *u = p;

	for (size_t i = 0; i < n; i++)
		*h = (*h ^ u[i]) * 1099511628211u; /* FNV-1a, 64 bits */
}

void pg_hash_u64(uint64_t *h, uint64_t v)
{
	unsigned char u[8];

	for (int i = 0; i < 8; i++)
		u[i] = (unsigned char)(v >> (56 - 8 * i));
	pg_hash_bytes(h, u, 8);
}

void pg_hash_counter(uint64_t *h, const struct strategy_counter *c)
{
	pg_hash_u64(h, c->ns_len);
	pg_hash_bytes(h, c->ns, c->ns_len);
	pg_hash_u64(h, c->key_len);
	pg_hash_bytes(h, c->key, c->key_len);
	pg_hash_u64(h, (uint64_t)c->start);
	pg_hash_u64(h, c->size);
}
