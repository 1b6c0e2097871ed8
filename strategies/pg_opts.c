/*
 * pg_opts.c - strategy_opts of the PostgreSQL strategy
 * (strategies/pg_int.h), and the names derived from the table's.
 *
 * Options (strategy_opts, a JSON object): conninfo (libpq connection
 * string; hosts must be numeric addresses or socket directories, because
 * libpq resolves host names with a blocking getaddrinfo()), table, timeout_ms,
 * purge_interval_s, pool_size. Connections get application_name
 * "spoa-ratelimit" unless conninfo names one.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "strategies/pg_int.h"

#define PG_DEFAULT_CONNINFO  "host=127.0.0.1 dbname=postgres"
#define PG_DEFAULT_TABLE     "rl_counters"
#define PG_DEFAULT_TIMEOUT   500      /* ms */
#define PG_DEFAULT_PURGE     60       /* s */
#define PG_TIMEOUT_MAX       600000   /* ms */
#define PG_POOL_DEFAULT      2        /* connections */

/* [a-z_][a-z0-9_]{0,62} */
static bool pg_ident_ok(const char *t)
{
	size_t n = strlen(t);

	if (n == 0 || n > PG_IDENT_MAX || !((t[0] >= 'a' && t[0] <= 'z') || t[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '_'))
			return false;
	return true;
}

/* A host entry libpq can use without a DNS lookup: empty (default socket),
 * a socket directory, or a numeric address. */
static bool pg_host_numeric(const char *h, size_t n)
{
	char buf[64];
	unsigned char addr[16];

	if (n == 0 || h[0] == '/' || h[0] == '@')
		return true;
	if (n >= sizeof(buf))
		return false;
	memcpy(buf, h, n);
	buf[n] = '\0';
	return inet_pton(AF_INET, buf, addr) == 1 || inet_pton(AF_INET6, buf, addr) == 1;
}

/* Checks a connection string: it parses, and connecting needs no DNS
 * lookup (libpq's would block the loop). Returns 0 or -1 with err. */
static int pg_conninfo_check(const char *ci, char *err, size_t errlen)
{
	char *msg = NULL;
	PQconninfoOption *opts = PQconninfoParse(ci, &msg), *o;
	const char *host = NULL, *hostaddr = NULL;
	int rc = 0;

	if (!opts) {
		char line[STRATEGY_ERR_MAX];

		pg_err_set(line, NULL, msg ? msg : "out of memory");
		snprintf(err, errlen, "conninfo: %s", line);
		PQfreemem(msg);
		return -1;
	}
	for (o = opts; o->keyword; o++) {
		if (!strcmp(o->keyword, "host"))
			host = o->val;
		else if (!strcmp(o->keyword, "hostaddr"))
			hostaddr = o->val;
	}
	if (host && *host && !(hostaddr && *hostaddr)) {
		const char *p = host;

		while (rc == 0) {
			size_t n = strcspn(p, ",");

			if (!pg_host_numeric(p, n)) {
				snprintf(err, errlen,
					 "conninfo: host \"%.*s\" needs a DNS lookup, which libpq "
					 "does blocking; give a numeric address or hostaddr=",
					 (int)(n > 64 ? 64 : n), p);
				rc = -1;
			}
			if (!p[n])
				break;
			p += n + 1;
		}
	}
	PQconninfoFree(opts);
	return rc;
}

/* The quoted name of a relation beside the table (table + suffix), made
 * to fit in PG_IDENT_MAX for any valid table name. */
void pg_derived_name(const char *table, const char *suffix, char *out, size_t outlen)
{
	size_t n = strlen(table), sn = strlen(suffix);

	if (n + sn <= PG_IDENT_MAX) {
		if (outlen >= n + sn + 3) { /* always (PG_IDENT_MAX + 3) */
			out[0] = '"';
			memcpy(out + 1, table, n);
			memcpy(out + 1 + n, suffix, sn);
			memcpy(out + 1 + n + sn, "\"", 2);
		}
	} else {
		uint32_t h = 2166136261u; /* FNV-1a: keeps distinct long names distinct */
		int keep = (int)(PG_IDENT_MAX - 9 - sn);

		for (size_t i = 0; i < n; i++)
			h = (h ^ (unsigned char)table[i]) * 16777619u;
		snprintf(out, outlen, "\"%.*s_%08x%s\"", keep, table, (unsigned)h, suffix);
	}
}

/* Parses strategy_opts. Returns 0, or -1 with err naming the option. The
 * strings point into root. */
static int pg_opts_parse(json_t *root, struct pg_opts *o, char *err, size_t errlen)
{
	const char *k;
	json_t *v;

	json_object_foreach(root, k, v) {
		if (!strcmp(k, "conninfo")) {
			if (!json_is_string(v)) {
				snprintf(err, errlen, "conninfo: expected a string, got %s",
					 store_json_type(v));
				return -1;
			}
			o->conninfo = json_string_value(v);
		} else if (!strcmp(k, "table")) {
			if (!json_is_string(v) || !pg_ident_ok(json_string_value(v))) {
				snprintf(err, errlen,
					 "table: expected a name matching [a-z_][a-z0-9_]{0,62}");
				return -1;
			}
			o->table = json_string_value(v);
		} else if (!strcmp(k, "timeout_ms")) {
			if (store_opt_int(k, v, 1, PG_TIMEOUT_MAX, &o->timeout_ms, err, errlen) < 0)
				return -1;
		} else if (!strcmp(k, "pool_size")) {
			if (store_opt_int(k, v, 1, PG_POOL_MAX, &o->pool_size, err, errlen) < 0)
				return -1;
		} else if (!strcmp(k, "purge_interval_s")) {
			/* 0: never */
			if (store_opt_int(k, v, 0, 7 * 86400, &o->purge_s, err, errlen) < 0)
				return -1;
		} else {
			return store_opt_unknown(k, "conninfo, table, timeout_ms, purge_interval_s, "
						 "pool_size", err, errlen);
		}
	}
	return 0;
}

/* The options of opts_json (NULL or "" = defaults) into *o, whose
 * strings point into *root (the caller decrefs it, also on failure).
 * Returns 0, or -1 with err. */
int pg_opts_load(const char *opts_json, struct pg_opts *o, json_t **root, char *err,
		 size_t errlen)
{
	*o = (struct pg_opts){ PG_DEFAULT_CONNINFO, PG_DEFAULT_TABLE, PG_DEFAULT_TIMEOUT,
			       PG_DEFAULT_PURGE, PG_POOL_DEFAULT };
	if (store_opts_load(opts_json, root, err, errlen) < 0 ||
	    (*root && pg_opts_parse(*root, o, err, errlen) < 0))
		return -1;
	return pg_conninfo_check(o->conninfo, err, errlen);
}
