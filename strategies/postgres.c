/*
 * postgres.c - the PostgreSQL strategy (struct strategy_ops postgres_strategy,
 * contract in strategies/strategy.h): counters live in one table, one row
 * per (namespace, key, window size, window start).
 *
 *   CREATE TABLE IF NOT EXISTS "<table>" (
 *       namespace    text             NOT NULL,
 *       key          bytea            NOT NULL,   -- keys are bytes
 *       window_start bigint           NOT NULL,   -- Unix seconds
 *       window_size  integer          NOT NULL,   -- seconds
 *       count        double precision NOT NULL,
 *       PRIMARY KEY (namespace, window_size, window_start, key))
 *       WITH (fillfactor = 50);  -- room for HOT updates: see below
 *   CREATE INDEX IF NOT EXISTS "<table>_ns_start_idx"
 *       ON "<table>" (namespace, window_start);
 *   CREATE TABLE IF NOT EXISTS "<table>_tokens" (     -- push tokens
 *       token bytea PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
 *   CREATE INDEX IF NOT EXISTS "<table>_tokens_at_idx" ON "<table>_tokens" (at);
 *
 * (Derived names too long for an identifier end in a hash of the table
 * name instead.) A user without the CREATE right needs both tables made
 * by an administrator.
 *
 * Every sync cycle rewrites every row it pushes. With pages only half
 * filled by inserts, the new version of a row fits in its own page (a HOT
 * update: no index entry to add, the old version pruned in place); with
 * full pages every update would insert into both indexes. Measured here:
 * 10k-row upserts about 1.6 times faster at fillfactor 50 than at 100.
 *
 * Design
 *   - A pool of pool_size connections (default 2), libpq's asynchronous API
 *     only (PQconnectStart/PQconnectPoll, non-blocking mode, pipeline
 *     mode), each driven from the caller's libev loop through pg_ev.c.
 *     Never PQexec, never PQcancel: a failed connection is dropped
 *     (PQfinish) and made again after a backoff (50 ms doubling to 2 s, back
 *     to 50 ms once set up). Each connection creates the table if missing
 *     and prepares the statements before it counts as ready.
 *   - Operations run one at a time, in the order they were submitted; the
 *     others wait in a FIFO of at most PG_QUEUE_MAX operations (beyond: "queue
 *     full" at once). While every connection is down (between a failure and
 *     the next attempt) operations are refused at once with the last
 *     connection error, so a caller learns about an outage without waiting;
 *     while connecting they are queued.
 *   - Why a pool: the store's side of an upsert is one backend on one core
 *     (70-80k rows/s here). A push is cut in chunks of PG_CHUNK_ROWS rows,
 *     and the chunks are spread over every ready connection,
 *     PG_CONN_DEPTH in flight on each (the next one is queued on the
 *     server while the previous runs), so a 100k-counter push keeps two
 *     backends busy. Every other operation is one statement on one
 *     connection.
 *   - Every chunk is sent with its own Sync: it is its own transaction, so
 *     row locks are held for one chunk (tens of ms), not for the whole push
 *     (a big push from one node would otherwise make every other node's
 *     push of the same keys wait past its timeout). The price: a push that
 *     fails part way has applied the chunks that committed. Their counters,
 *     and only theirs, come back with ok = true and a valid total (status
 *     is still -1); every other counter has ok = false (after a timeout or
 *     a lost connection, a chunk in flight may or may not have been
 *     applied; it is never resent: the caller may resend it with the
 *     push's token, below). Every counter's own update is atomic.
 *   - Only the validated table name ever enters SQL text; every value
 *     travels as a bound parameter, in binary format (arrays included), so
 *     keys may hold any byte. Results are requested in binary too and their
 *     shape (column count, types, formats, lengths, NULLs) is checked
 *     before anything is read.
 *   - push_diffs sorts the batch by (namespace, size, start, key) and
 *     merges duplicates: the upsert then never touches a row twice in one
 *     statement, chunks hold disjoint key ranges, and every transaction
 *     locks rows in the same order (no deadlocks, between nodes or between
 *     the connections of one). Non-zero diffs go through upserts, zero
 *     diffs through SELECTs (no row is created). Returned rows carry the
 *     counter's identity and are matched back to the batch (in practice in
 *     order; by binary search otherwise).
 *   - Tokens (push_diffs with a token; NULL: none of this). Each upsert
 *     chunk gets its own token, the push's token + ":" + a hash of the
 *     chunk's row count and first and last counters, stable when the
 *     caller resends the counters that were not confirmed (see
 *     pg_chunk_token()). Its transaction is two pipelined statements: the
 *     first inserts the chunk token ON CONFLICT DO NOTHING and records in
 *     a transaction-local setting whether it was new; the second is the
 *     upsert, adding the diffs if so and 0 if not (a chunk applied by an
 *     earlier try: its rows come back ok with their latest totals, nothing
 *     is added). The token commits or rolls back with the rows. A try
 *     still running on the server holds the token's row: the insert waits
 *     for it to end, and only then are the rows touched (the token first,
 *     in its own statement: the order of a statement's CTEs is not
 *     defined). Tokens older than STRATEGY_TOKEN_TTL (server clock) are
 *     deleted by purge() and by the periodic purge. Cost per 2000-row
 *     chunk: one tiny insert (and its two index entries) and one more
 *     result.
 *   - Timeouts: each operation has a timer of timeout_ms, started when it
 *     is submitted and restarted whenever the store sends something (a
 *     result, or bytes of one): timeout_ms bounds how long the store may
 *     stay silent, so a big push split in chunks, or a big fetch, may take
 *     longer than timeout_ms as long as data keeps coming. When the timer
 *     fires on the running operation, the whole pool is dropped (the store
 *     is not answering; ready() turns false); on a waiting operation, that
 *     one fails alone. Connecting (up to the table being usable) is
 *     bounded by timeout_ms as a whole.
 *   - admit(): each admission is its own transaction, pipelined behind the
 *     others: insert the row if missing (count 0), then one statement
 *     locks it (SELECT ... FOR UPDATE in a CTE), reads the previous window,
 *     decides, adds the hit and the grant, returning (count, previous,
 *     admitted, grant). One row per transaction: two nodes' batches cannot
 *     deadlock. With a token, rl_token runs first with the admission's own
 *     token (the call's, ':', a hash of the admission and of the identical
 *     ones after it); an admitted decision is recorded as that token +
 *     ":a" + the grant as text, so a resend returns both without adding
 *     anything.
 *   - heartbeat(): a row per node in the tokens table (see rl_nodes),
 *     refreshed once per sync cycle and dropped with the old tokens; the
 *     counters table holds counters only.
 *   - Purge: purge() deletes what the caller names, and old tokens. Also, every
 *     purge_interval_s (0 = never) the instance purges, for each namespace
 *     and window size it has seen in its own operations, windows older
 *     than twice the size.
 *   - Callbacks never run inside the call that started the operation: the
 *     API only queues, and a zero-delay timer dispatches. The instance may
 *     be destroyed from inside any callback; it is then freed when our
 *     libev callback returns (docs/STYLE.md, rule 8).
 *
 * Refused at once (-1 and errstr, no callback): a key over PG_KEY_MAX
 * bytes (btree entries are limited to ~2.7 kB; one such key would fail its
 * whole chunk on every sync), a namespace over PG_NS_MAX bytes or holding
 * a NUL (it is text), a window size of 0 or over INT32_MAX, a diff that is
 * not finite, an empty token or one over STRATEGY_TOKEN_MAX bytes, a full
 * queue, an instance that is down. Callbacks get errstr
 * NULL on success. Rows passed to a rows callback point into libpq's result
 * and are valid only during the callback.
 *
 * Options (strategy_opts, a JSON object): conninfo (libpq connection
 * string; hosts must be numeric addresses or socket directories, because
 * libpq resolves host names with a blocking getaddrinfo()), table, timeout_ms,
 * purge_interval_s, pool_size. Connections get application_name
 * "spoa-ratelimit" unless conninfo names one.
 */
#include <arpa/inet.h>
#include <ev.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strategies/container.h"
#include "strategies/store.h"
#include "strategies/pg_ev.h"
#include "strategies/strategy.h"
#include "strategies/window_start.h"

#define PG_DEFAULT_CONNINFO  "host=127.0.0.1 dbname=postgres"
#define PG_DEFAULT_TABLE     "rl_counters"
#define PG_DEFAULT_TIMEOUT   500      /* ms */
#define PG_DEFAULT_PURGE     60       /* s */
#define PG_TIMEOUT_MAX       600000   /* ms */
#define PG_BACKOFF_MIN       0.05     /* s */
#define PG_BACKOFF_MAX       2.0      /* s */
#define PG_QUEUE_MAX         64       /* operations queued or in flight */
#define PG_POOL_DEFAULT      2        /* connections */
#define PG_POOL_MAX          8
#define PG_CONN_DEPTH        2        /* push chunks in flight per connection */
#ifndef PG_CHUNK_ROWS                 /* rows per upsert / read statement */
#define PG_CHUNK_ROWS        2000     /* (1000 and 5000: no better here) */
#endif
#define PG_CHUNK_BYTES       (8u << 20) /* parameter bytes per statement */
#define PG_IDENT_MAX         63       /* NAMEDATALEN - 1 */
#define PG_NS_MAX            256      /* namespace bytes */
#define PG_KEY_MAX           2048     /* key bytes: btree entries stay < 2704 */
#define PG_SEEN_MAX          64       /* namespaces remembered for the purge */
#define PG_SEEN_SIZES        16       /* window sizes per namespace */
#define PG_TIME_MAX          ((int64_t)1 << 62) /* |now|: window arithmetic stays in range */
#define PG_GUC_FRESH         "spoa_ratelimit.token_fresh" /* transaction-local */
#define PG_STR_(x)           #x
#define PG_STR(x)            PG_STR_(x)

/* Type OIDs, fixed in the system catalog (pg_type.dat). */
enum pg_oid {
	PG_OID_BOOL = 16,
	PG_OID_BYTEA = 17,
	PG_OID_INT8 = 20,
	PG_OID_INT4 = 23,
	PG_OID_TEXT = 25,
	PG_OID_FLOAT8 = 701,
	PG_OID_BYTEA_ARRAY = 1001,
	PG_OID_INT4_ARRAY = 1007,
	PG_OID_TEXT_ARRAY = 1009,
	PG_OID_INT8_ARRAY = 1016,
	PG_OID_FLOAT8_ARRAY = 1022,
};

/* ------------------------------------------------------------------------
 * Statements. "@T@" is replaced by the quoted table name, nothing else is
 * ever put into SQL text.
 */
enum pg_stmt {
	PG_STMT_UPSERT = 0,
	PG_STMT_READ,
	PG_STMT_FETCH,
	PG_STMT_PURGE,
	PG_STMT_TOKEN,
	PG_STMT_UPSERT_TOK,
	PG_STMT_PURGE_TOK,
	PG_STMT_ADMIT_ROW,
	PG_STMT_ADMIT,
	PG_STMT_ADMIT_TOK,
	PG_STMT_NODES,
	PG_STMT_COUNT
};

#define PG_PARAMS_MAX 12          /* parameters of one statement */

struct pg_stmt_def {
	const char *name;
	const char *sql;
	int nparams;
	Oid types[PG_PARAMS_MAX];
};

/* The decision of an admission (struct strategy_admit), on a row locked
 * for the transaction: $1 namespace, $2 key, $3 start, $4 size, $5 diff,
 * $6 cost, $7 limit, $8 weight, $9 count_denied, $10 want, $11 nodes
 * ($12: the admission's token). A row's count holds hits, its reserved
 * column the grants nodes have not reported spent or given back (never
 * read below 0: a push may have made a row with a negative one); the
 * decision counts both, a grant goes to reserved. o holds the row (count,
 * r: reserved), p the previous window (prev: its count, pr: count +
 * reserved); d0 holds (v: count + diff, r, prev, pr, adm); PG_ADMIT_GRANT
 * the grant of an admitted hit, a multiple of the cost (NULLIF: a zero
 * cost or node count gives none, never a division by zero, even folded at
 * planning). */
#define PG_ADMIT_ROWS \
	"o AS (SELECT count, greatest(reserved, 0) AS r FROM @T@ WHERE namespace = $1" \
	" AND window_size = $4 AND window_start = $3 AND key = $2 FOR UPDATE)," \
	" p0 AS (SELECT count, greatest(reserved, 0) AS r FROM @T@ WHERE namespace = $1" \
	" AND window_size = $4 AND window_start = $3 - $4 AND key = $2)," \
	" p AS (SELECT coalesce((SELECT count FROM p0), 0) AS prev," \
	" coalesce((SELECT count + r FROM p0), 0) AS pr),"
#define PG_ADMIT_GRANT \
	" d0, LATERAL (SELECT coalesce(floor(LEAST($10, ($7 - d0.v - d0.r - $6 - d0.pr * $8)" \
	" / (2 * NULLIF($11, 0))) / NULLIF($6, 0)) * $6, 0) AS g) x"
#define PG_ADMIT_GR "CASE WHEN d0.adm AND x.g > 0 AND x.g >= $6 THEN x.g ELSE 0 END"
#define PG_ADMIT_UPDATE \
	" FROM d WHERE t.namespace = $1 AND t.window_size = $4 AND t.window_start = $3" \
	" AND t.key = $2 RETURNING t.count, d.prev, d.adm, d.gr"
#define PG_ADMIT_TYPES \
	{ PG_OID_TEXT, PG_OID_BYTEA, PG_OID_INT8, PG_OID_INT4, PG_OID_FLOAT8, PG_OID_FLOAT8, \
	  PG_OID_FLOAT8, PG_OID_FLOAT8, PG_OID_BOOL, PG_OID_FLOAT8, PG_OID_INT4, PG_OID_BYTEA }

static const struct pg_stmt_def pg_stmts[PG_STMT_COUNT] = {
	/* $1..$6: namespaces, keys, starts, sizes, what to add to the counts
	 * (diff + grants spent), what to add to the reservations (- grants
	 * spent and returned, never going below 0; a new row takes it as it
	 * is: decisions read a negative one as 0); all the same length.
	 * Returns the new count of every row. */
	[PG_STMT_UPSERT] = {
		"rl_upsert",
		"INSERT INTO @T@ AS t (namespace, key, window_start, window_size, count, reserved)"
		" SELECT * FROM unnest($1::text[], $2::bytea[], $3::int8[], $4::int4[],"
		" $5::float8[], $6::float8[])"
		" ON CONFLICT (namespace, window_size, window_start, key)"
		" DO UPDATE SET count = t.count + EXCLUDED.count,"
		" reserved = CASE WHEN EXCLUDED.reserved = 0 THEN t.reserved"
		" ELSE greatest(t.reserved + EXCLUDED.reserved, 0) END"
		" RETURNING t.namespace, t.key, t.window_start, t.window_size, t.count",
		6,
		{ PG_OID_TEXT_ARRAY, PG_OID_BYTEA_ARRAY, PG_OID_INT8_ARRAY, PG_OID_INT4_ARRAY,
		  PG_OID_FLOAT8_ARRAY, PG_OID_FLOAT8_ARRAY },
	},
	/* The same identities, read only; absent rows are not returned. */
	[PG_STMT_READ] = {
		"rl_read",
		"SELECT t.namespace, t.key, t.window_start, t.window_size, t.count"
		" FROM unnest($1::text[], $2::bytea[], $3::int8[], $4::int4[])"
		" AS u(namespace, key, window_start, window_size)"
		" JOIN @T@ AS t ON t.namespace = u.namespace AND t.window_size = u.window_size"
		" AND t.window_start = u.window_start AND t.key = u.key",
		4,
		{ PG_OID_TEXT_ARRAY, PG_OID_BYTEA_ARRAY, PG_OID_INT8_ARRAY, PG_OID_INT4_ARRAY },
	},
	/* $1 namespace, $2/$3 (size, start) pairs. */
	[PG_STMT_FETCH] = {
		"rl_fetch",
		"SELECT t.key, t.window_start, t.window_size, t.count"
		" FROM unnest($2::int4[], $3::int8[]) AS w(window_size, window_start)"
		" JOIN @T@ AS t ON t.namespace = $1 AND t.window_size = w.window_size"
		" AND t.window_start = w.window_start",
		3,
		{ PG_OID_TEXT, PG_OID_INT4_ARRAY, PG_OID_INT8_ARRAY },
	},
	/* $1 namespace, $2/$3 (size, newest start to delete) pairs. */
	[PG_STMT_PURGE] = {
		"rl_purge",
		"DELETE FROM @T@ AS t"
		" USING unnest($2::int4[], $3::int8[]) AS p(window_size, cutoff)"
		" WHERE t.namespace = $1 AND t.window_size = p.window_size"
		" AND t.window_start <= p.cutoff",
		3,
		{ PG_OID_TEXT, PG_OID_INT4_ARRAY, PG_OID_INT8_ARRAY },
	},
	/* Pushes with a token, step 1 of a chunk's transaction: $1 = the
	 * chunk's token. Remembers it if new; says in a transaction-local
	 * setting (and returns) 'y' if it was new, 'n' if a transaction that
	 * committed before (or while we waited for it) had it. */
	[PG_STMT_TOKEN] = {
		"rl_token",
		"WITH k AS (INSERT INTO @K@ (token) VALUES ($1) ON CONFLICT DO NOTHING"
		" RETURNING true)"
		" SELECT set_config('" PG_GUC_FRESH "',"
		" CASE WHEN EXISTS (SELECT FROM k) THEN 'y' ELSE 'n' END, true)",
		1,
		{ PG_OID_BYTEA },
	},
	/* Step 2: the upsert, adding the diffs if the token was new and 0 if
	 * not (the rows are then only locked and returned, their totals the
	 * latest committed). The same plan as rl_upsert: arbiter index
	 * lookups, nothing left to the planner's estimates. */
	[PG_STMT_UPSERT_TOK] = {
		"rl_upsert_tok",
		"INSERT INTO @T@ AS t (namespace, key, window_start, window_size, count, reserved)"
		" SELECT u.namespace, u.key, u.window_start, u.window_size,"
		" CASE WHEN f.fresh THEN u.count ELSE 0 END,"
		" CASE WHEN f.fresh THEN u.reserved ELSE 0 END"
		" FROM (SELECT current_setting('" PG_GUC_FRESH "') = 'y' AS fresh) AS f,"
		" unnest($1::text[], $2::bytea[], $3::int8[], $4::int4[], $5::float8[],"
		" $6::float8[]) AS u(namespace, key, window_start, window_size, count, reserved)"
		" ON CONFLICT (namespace, window_size, window_start, key)"
		" DO UPDATE SET count = t.count + EXCLUDED.count,"
		" reserved = CASE WHEN EXCLUDED.reserved = 0 THEN t.reserved"
		" ELSE greatest(t.reserved + EXCLUDED.reserved, 0) END"
		" RETURNING t.namespace, t.key, t.window_start, t.window_size, t.count",
		6,
		{ PG_OID_TEXT_ARRAY, PG_OID_BYTEA_ARRAY, PG_OID_INT8_ARRAY, PG_OID_INT4_ARRAY,
		  PG_OID_FLOAT8_ARRAY, PG_OID_FLOAT8_ARRAY },
	},
	/* Admissions (one transaction each): the row first, so that it can
	 * be locked. */
	[PG_STMT_ADMIT_ROW] = {
		"rl_admit_row",
		"INSERT INTO @T@ (namespace, key, window_start, window_size, count)"
		" VALUES ($1, $2, $3, $4, 0)"
		" ON CONFLICT (namespace, window_size, window_start, key) DO NOTHING",
		4,
		{ PG_OID_TEXT, PG_OID_BYTEA, PG_OID_INT8, PG_OID_INT4 },
	},
	[PG_STMT_ADMIT] = {
		"rl_admit",
		"WITH " PG_ADMIT_ROWS
		" d0 AS (SELECT o.count + $5 AS v, o.r, p.prev, p.pr,"
		" o.count + $5 + o.r + p.pr * $8 + $6 <= $7 AS adm FROM o, p),"
		" d AS (SELECT d0.v, d0.r, d0.prev, d0.adm, " PG_ADMIT_GR " AS gr FROM"
		PG_ADMIT_GRANT ")"
		" UPDATE @T@ AS t SET count = d.v + CASE WHEN d.adm OR $9 THEN $6 ELSE 0 END,"
		" reserved = d.r + d.gr"
		PG_ADMIT_UPDATE,
		11,
		PG_ADMIT_TYPES,
	},
	/* With a token ($12, the admission's; rl_token ran before it in the
	 * transaction): if it was new, as rl_admit, and an admitted decision
	 * is recorded as the token + ":a" + the grant in text; if not, nothing
	 * is added and the recorded decision and grant come back with the
	 * current totals. */
	[PG_STMT_ADMIT_TOK] = {
		"rl_admit_tok",
		"WITH f AS (SELECT current_setting('" PG_GUC_FRESH "') = 'y' AS fresh), "
		PG_ADMIT_ROWS
		" r AS (SELECT substring(token from length($12) + 3) AS g FROM @K@"
		" WHERE token >= $12 || '\\x3a61'::bytea AND token < $12 || '\\x3a62'::bytea"
		" LIMIT 1),"
		" d0 AS (SELECT f.fresh, CASE WHEN f.fresh THEN o.count + $5 ELSE o.count END AS v,"
		" o.r, p.prev, p.pr, CASE WHEN f.fresh THEN o.count + $5 + o.r + p.pr * $8 + $6 <= $7"
		" ELSE EXISTS (SELECT FROM r) END AS adm,"
		" (SELECT NULLIF(convert_from(r.g, 'UTF8'), '')::float8 FROM r) AS rg"
		" FROM o, p, f),"
		" d AS (SELECT d0.fresh, d0.v, d0.r, d0.prev, d0.adm, CASE WHEN d0.fresh THEN "
		PG_ADMIT_GR " ELSE coalesce(d0.rg, 0) END AS gr FROM" PG_ADMIT_GRANT "),"
		" k AS (INSERT INTO @K@ (token) SELECT $12 || '\\x3a61'::bytea"
		" || convert_to(d.gr::text, 'UTF8') FROM d"
		" WHERE d.fresh AND d.adm ON CONFLICT DO NOTHING)"
		" UPDATE @T@ AS t SET count = d.v"
		" + CASE WHEN d.fresh AND (d.adm OR $9) THEN $6 ELSE 0 END,"
		" reserved = CASE WHEN d.fresh THEN d.r + d.gr ELSE t.reserved END"
		PG_ADMIT_UPDATE,
		12,
		PG_ADMIT_TYPES,
	},
	/* Heartbeat: a node's row in the tokens table, "\x01nodes:<ns>\x01<node>"
	 * (push tokens never start with \x01), `at` its last beat (the
	 * server's clock), dropped with the old tokens; and how many nodes
	 * beat within $4 seconds: $1 <= token < $3 is the namespace's range,
	 * $2 this node. The count leaves out the CTE's change (one snapshot):
	 * itself is +1. */
	[PG_STMT_NODES] = {
		"rl_nodes",
		"WITH up AS (INSERT INTO @K@ (token) VALUES ($2)"
		" ON CONFLICT (token) DO UPDATE SET at = now())"
		" SELECT (1 + count(*))::int8 FROM @K@ WHERE token >= $1 AND token < $3"
		" AND token <> $2 AND at >= now() - make_interval(secs => $4)",
		4,
		{ PG_OID_BYTEA, PG_OID_BYTEA, PG_OID_BYTEA, PG_OID_FLOAT8 },
	},
	/* Tokens past their time (the server's clock: it set them). */
	[PG_STMT_PURGE_TOK] = {
		"rl_purge_tok",
		"DELETE FROM @K@ WHERE at < now() - interval '" PG_STR(STRATEGY_TOKEN_TTL)
		" seconds'",
		0,
		{ 0 },
	},
};

/* Set-up, run in one pipeline when the table was missing. The lock makes
 * concurrent CREATE ... IF NOT EXISTS from several nodes safe (they race
 * on the catalog otherwise). $1 = the quoted table name. */
static const char pg_sql_probe[] =
	"SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND EXISTS"
	" (SELECT FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'reserved'"
	" AND NOT attisdropped)";
static const char pg_sql_lock[] = "SELECT pg_advisory_xact_lock(29292, hashtext($1))"; /* "rl" */
static const char pg_tpl_table[] =
	"CREATE TABLE IF NOT EXISTS @T@ (namespace text NOT NULL, key bytea NOT NULL,"
	" window_start bigint NOT NULL, window_size integer NOT NULL,"
	" count double precision NOT NULL, reserved double precision NOT NULL DEFAULT 0,"
	" PRIMARY KEY (namespace, window_size, window_start, key)) WITH (fillfactor = 50)";
/* A table of an earlier version: the reservations' column (no rewrite:
 * a constant default). */
static const char pg_tpl_reserved[] =
	"ALTER TABLE @T@ ADD COLUMN IF NOT EXISTS reserved double precision NOT NULL DEFAULT 0";
static const char pg_tpl_index[] =
	"CREATE INDEX IF NOT EXISTS @I@ ON @T@ (namespace, window_start)";
static const char pg_tpl_tokens[] =
	"CREATE TABLE IF NOT EXISTS @K@ (token bytea PRIMARY KEY,"
	" at timestamptz NOT NULL DEFAULT now())";
static const char pg_tpl_tokens_index[] =
	"CREATE INDEX IF NOT EXISTS @J@ ON @K@ (at)";

/* ------------------------------------------------------------------------
 * Types.
 */
enum pg_state {
	PG_ST_DOWN = 0,   /* no connection; the reconnect timer is armed */
	PG_ST_CONNECTING, /* PQconnectPoll() steps */
	PG_ST_SETUP,      /* probe / create table / prepare */
	PG_ST_READY,      /* usable */
	PG_ST_COUNT
};

enum pg_op_kind {
	PG_OP_PUSH = 0, /* push_diffs */
	PG_OP_GET,      /* get_window: a push of one, read only */
	PG_OP_FETCH,    /* get_counters */
	PG_OP_PURGE,    /* purge */
	PG_OP_MAINT,    /* periodic purge, no callback */
	PG_OP_PROBE,    /* set-up of one connection: does the table exist? */
	PG_OP_CREATE,   /* set-up: create it if not, prepare statements */
	PG_OP_ADMIT,    /* admit: one transaction per admission */
	PG_OP_NODES,    /* heartbeat */
	PG_OP_COUNT
};

/* A growable byte buffer for binary parameters. */
struct pg_buf {
	char *p;
	size_t len;
	size_t cap;
	bool oom;
};

/* One distinct counter of a push: members order[first .. first+nmemb). */
struct pg_group {
	const struct strategy_counter *c;
	size_t first;
	size_t nmemb;
	double diff;
	double spent, returned;   /* grants', merged */
	double total;
	bool got;                 /* a row came back */
	bool committed;           /* its chunk's transaction committed */
};

/* One statement (and transaction) of a push: groups idx[lo..hi) of the
 * upsert or the read list. */
struct pg_chunk {
	bool upsert;
	bool tok;                 /* an upsert of a push with a token */
	bool got_flag;            /* tok: the token statement's result came */
	size_t lo;
	size_t hi;
	bool got_result;          /* its rows were read */
	bool failed;
	bool done;                /* its Sync arrived, or never will */
};

struct pg;

struct pg_op {
	struct store_op base;     /* done queue, silence timer (store.h) */
	struct pg_op *prev;
	struct pg_op *next;
	struct pg *s;
	enum pg_op_kind kind;
	bool queued;              /* in the FIFO */
	int status;               /* its outcome, once finished */
	strategy_done_cb done_cb;
	strategy_rows_cb rows_cb;
	void *arg;
	unsigned nerrors;         /* failures seen */
	bool failed;
	char err[STRATEGY_ERR_MAX];

	/* Everything but PUSH and GET: sent whole on one connection. */
	bool started;
	bool ended;               /* last Sync arrived, or its connection died */
	size_t nstmts;            /* statements sent */
	size_t nres;              /* statement results received */
	size_t nsyncs;            /* Syncs sent */
	size_t nsynced;           /* Syncs received */

	/* PUSH, GET: chunks spread over the pool. */
	bool has_token;
	size_t token_len;
	char token[STRATEGY_TOKEN_MAX];
	struct strategy_counter *batch;
	size_t n;
	struct strategy_counter **order;
	struct pg_group *groups;
	size_t ngroups;
	size_t *up;               /* groups with diff != 0 */
	size_t nup;
	size_t *rd;               /* groups to read */
	size_t nrd;
	struct pg_chunk *chunks;
	size_t nchunks;
	size_t next_chunk;        /* first one not sent */
	size_t chunks_done;

	/* NODES ("now" is the server's clock) */
	char node[64];
	size_t node_len;
	double ttl;
	unsigned *active;

	/* ADMIT */
	struct strategy_admit *admits;
	uint64_t *adm_ids;        /* with a token: each admission's token id */

	/* FETCH, PURGE */
	char *ns;
	size_t ns_len;
	int32_t *sizes;
	int64_t *starts;          /* FETCH: window starts; PURGE: cutoffs */
	size_t nw;
	PGresult *res;            /* FETCH: rows, freed after the callback */
	struct strategy_row *rows;
	size_t nrows;
};

/* One connection of the pool. */
struct pg_conn {
	struct pg *s;
	enum pg_state state;
	PGconn *conn;
	struct pg_ev ev;
	ev_timer reconnect;       /* DOWN: next attempt */
	ev_timer conn_timer;      /* bounds CONNECTING + SETUP */
	struct store_backoff backoff; /* next reconnect delay */
	bool table_present;
	struct pg_op *setup;      /* PROBE or CREATE in flight */
	struct pg_op *op;         /* the active operation, while working for it */
	size_t fifo[PG_CONN_DEPTH]; /* PUSH: its chunks in flight, oldest first */
	size_t nfifo;
};

/* A namespace and its window sizes, for the periodic purge. */
struct pg_seen {
	char *ns;
	size_t ns_len;
	uint32_t sizes[PG_SEEN_SIZES];
	size_t nsizes;
};

struct pg {
	struct store_core core;   /* kick, done queue, callback guard (store.h) */
	struct ev_loop *loop;
	struct pg_conn conns[PG_POOL_MAX];
	size_t nconns;
	ev_timer maint;           /* periodic purge */
	double timeout;           /* s */
	double purge_interval;    /* s, 0 = never */
	bool maint_pending;
	struct pg_op *active;     /* the operation being executed */
	struct pg_op *head;       /* waiting operations, FIFO */
	struct pg_op *tail;
	size_t nops;              /* user and maintenance ops: active + waiting */
	struct pg_seen seen[PG_SEEN_MAX];
	size_t nseen;
	char *conninfo;
	char table_name[PG_IDENT_MAX + 1];    /* unquoted, for the lock */
	char table_quoted[PG_IDENT_MAX + 3];
	char tokens_quoted[PG_IDENT_MAX + 3]; /* "<table>_tokens" */
	char *sql[PG_STMT_COUNT];
	char *sql_table;
	char *sql_reserved;
	char *sql_index;
	char *sql_tokens;
	char *sql_tokens_index;
	struct pg_buf par[PG_PARAMS_MAX]; /* scratch for one statement's parameters */
	struct pg_buf tokpar;     /* scratch for a chunk's token */
	char last_err[STRATEGY_ERR_MAX];
};


static void pg_dispatch(struct pg *s);
static void pg_conn_lost(struct pg_conn *c, const char *why);

/* ------------------------------------------------------------------------
 * Small helpers: errors, buffers, binary values.
 */

/* Copies the first line of msg (without a "ERROR:  " style severity,
 * trailing blanks trimmed) after prefix into dst[STRATEGY_ERR_MAX]. */
static void pg_err_set(char dst[STRATEGY_ERR_MAX], const char *prefix, const char *msg)
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
static void pg_err_result(char dst[STRATEGY_ERR_MAX], const PGresult *r, PGconn *conn)
{
	const char *m = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;

	if (!m || !*m)
		m = r ? PQresultErrorMessage(r) : NULL;
	if ((!m || !*m) && conn)
		m = PQerrorMessage(conn);
	pg_err_set(dst, NULL, m);
}

static void pg_buf_reserve(struct pg_buf *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->oom || b->len + more <= b->cap)
		return;
	cap = b->cap ? b->cap : 4096;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return;
	}
	b->p = p;
	b->cap = cap;
}

static void pg_buf_put(struct pg_buf *b, const void *d, size_t n)
{
	pg_buf_reserve(b, n);
	if (b->oom)
		return;
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void pg_buf_u32(struct pg_buf *b, uint32_t v)
{
	unsigned char u[4] = { (unsigned char)(v >> 24), (unsigned char)(v >> 16),
			       (unsigned char)(v >> 8), (unsigned char)v };

	pg_buf_put(b, u, 4);
}

static void pg_buf_u64(struct pg_buf *b, uint64_t v)
{
	pg_buf_u32(b, (uint32_t)(v >> 32));
	pg_buf_u32(b, (uint32_t)v);
}

static void pg_buf_f64(struct pg_buf *b, double d)
{
	uint64_t v;

	memcpy(&v, &d, sizeof(v));
	pg_buf_u64(b, v);
}

/*
 * Binary array parameter (array_recv), one dimension, no NULLs:
 *
 *   +--------+--------+----------+---------+---------+
 *   | ndim=1 | flags=0| elem oid | nelems  | lbound=1|   int32 each, big endian
 *   +--------+--------+----------+---------+---------+
 *   then per element: | int32 length | length bytes |
 *
 * An empty array is ndim=0, flags=0, elem oid and nothing else.
 */
static void pg_array_begin(struct pg_buf *b, Oid elem, size_t n)
{
	b->len = 0;
	b->oom = false;
	pg_buf_u32(b, n ? 1 : 0);
	pg_buf_u32(b, 0);
	pg_buf_u32(b, (uint32_t)elem);
	if (n) {
		pg_buf_u32(b, (uint32_t)n);
		pg_buf_u32(b, 1);
	}
}

static void pg_array_bytes(struct pg_buf *b, const char *p, size_t n)
{
	pg_buf_u32(b, (uint32_t)n);
	pg_buf_put(b, p, n);
}

static void pg_array_i32(struct pg_buf *b, int32_t v)
{
	pg_buf_u32(b, 4);
	pg_buf_u32(b, (uint32_t)v);
}

static void pg_array_i64(struct pg_buf *b, int64_t v)
{
	pg_buf_u32(b, 8);
	pg_buf_u64(b, (uint64_t)v);
}

static void pg_array_f64(struct pg_buf *b, double v)
{
	pg_buf_u32(b, 8);
	pg_buf_f64(b, v);
}

static uint32_t pg_get_u32(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;

	return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

static uint64_t pg_get_u64(const char *p)
{
	return (uint64_t)pg_get_u32(p) << 32 | pg_get_u32(p + 4);
}

static double pg_get_f64(const char *p)
{
	uint64_t v = pg_get_u64(p);
	double d;

	memcpy(&d, &v, sizeof(d));
	return d;
}

/* Checks that r has exactly ncols binary columns of the given types.
 * Returns 0 or -1. */
static int pg_check_cols(const PGresult *r, const Oid *types, int ncols)
{
	if (PQnfields(r) != ncols)
		return -1;
	for (int i = 0; i < ncols; i++)
		if (PQftype(r, i) != types[i] || PQfformat(r, i) != 1)
			return -1;
	return 0;
}

/* A non-NULL value of exactly len bytes (len < 0: any length). */
static const char *pg_value(const PGresult *r, int row, int col, int len, int *got)
{
	int n;

	if (PQgetisnull(r, row, col))
		return NULL;
	n = PQgetlength(r, row, col);
	if (n < 0 || (len >= 0 && n != len))
		return NULL;
	if (got)
		*got = n;
	return PQgetvalue(r, row, col);
}

/* Orders bytes by content, then by length. */
static int pg_cmp_bytes(const char *a, size_t an, const char *b, size_t bn)
{
	int c;

	if (a == b && an == bn)
		return 0;
	c = memcmp(a, b, an < bn ? an : bn);
	if (c)
		return c;
	return an < bn ? -1 : an > bn;
}

/* The order of a push: namespace, size, start, key. */
static int pg_cmp_ident(const char *ns, size_t ns_len, uint32_t size, int64_t start,
			const char *key, size_t key_len, const struct strategy_counter *b)
{
	int c = pg_cmp_bytes(ns, ns_len, b->ns, b->ns_len);

	if (c)
		return c;
	if (size != b->size)
		return size < b->size ? -1 : 1;
	if (start != b->start)
		return start < b->start ? -1 : 1;
	return pg_cmp_bytes(key, key_len, b->key, b->key_len);
}

static int pg_cmp_counters(const void *pa, const void *pb)
{
	const struct strategy_counter *a = *(const struct strategy_counter *const *)pa;
	const struct strategy_counter *b = *(const struct strategy_counter *const *)pb;

	return pg_cmp_ident(a->ns, a->ns_len, a->size, a->start, a->key, a->key_len, b);
}

/* The sort of a push: the order above, then the batch's own (members of a
 * group are summed in batch order, so a resend of the same counters sums
 * to the very same double). */
static int pg_cmp_counters_sort(const void *pa, const void *pb)
{
	const struct strategy_counter *a = *(const struct strategy_counter *const *)pa;
	const struct strategy_counter *b = *(const struct strategy_counter *const *)pb;
	int c = pg_cmp_counters(pa, pb);

	if (c)
		return c;
	return a < b ? -1 : a > b;
}

/* Replaces every "@T@" with the table, "@I@" with its index, "@K@" with the
 * tokens table and "@J@" with its index (names[0..3], quoted). Returns a
 * malloc'd string or NULL. */
static char *pg_sql_fill(const char *tpl, const char *const names[4])
{
	static const char marks[] = "TIKJ";
	struct pg_buf b = { 0 };
	const char *p = tpl;

	while (*p) {
		const char *m = p[0] == '@' && p[1] && p[2] == '@' ? strchr(marks, p[1]) : NULL;

		if (m) {
			const char *v = names[m - marks];

			pg_buf_put(&b, v, strlen(v));
			p += 3;
		} else {
			pg_buf_put(&b, p++, 1);
		}
	}
	pg_buf_put(&b, "", 1);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

/* ------------------------------------------------------------------------
 * Entering and leaving our libev callbacks: an instance destroyed from a
 * user callback is freed when the outermost of ours returns.
 */
static void pg_free(struct pg *s)
{
	for (int i = 0; i < PG_STMT_COUNT; i++)
		free(s->sql[i]);
	free(s->sql_table);
	free(s->sql_reserved);
	free(s->sql_index);
	free(s->sql_tokens);
	free(s->sql_tokens_index);
	for (size_t i = 0; i < PG_PARAMS_MAX; i++)
		free(s->par[i].p);
	free(s->tokpar.p);
	for (size_t i = 0; i < s->nseen; i++)
		free(s->seen[i].ns);
	free(s->conninfo);
	free(s);
}

static void pg_core_free(struct store_core *c)
{
	pg_free(container_of(c, struct pg, core));
}

/* Around every libev callback of the instance (store.h): the callbacks
 * of the operations finished meanwhile run when the outermost returns. */
static void pg_enter(struct pg *s)
{
	store_enter(&s->core);
}

/* Returns true if s was freed: the caller must not touch it again. */
static bool pg_leave(struct pg *s)
{
	return store_leave(&s->core);
}

/* ------------------------------------------------------------------------
 * Operations: allocation, queue, completion.
 */
static void pg_op_timeout(struct ev_loop *loop, ev_timer *w, int revents);
static void pg_op_deliver(struct store_op *b);

static struct pg_op *pg_op_new(struct pg *s, enum pg_op_kind kind)
{
	struct pg_op *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->s = s;
	op->base.core = &s->core;
	op->base.deliver = pg_op_deliver;
	op->kind = kind;
	return op;
}

static void pg_op_free(struct pg_op *op)
{
	free(op->order);
	free(op->groups);
	free(op->up);
	free(op->rd);
	free(op->chunks);
	free(op->ns);
	free(op->sizes);
	free(op->starts);
	free(op->rows);
	free(op->adm_ids);
	if (op->res)
		PQclear(op->res);
	free(op);
}

static bool pg_op_is_push(const struct pg_op *op)
{
	return op->kind == PG_OP_PUSH || op->kind == PG_OP_GET;
}

static void pg_queue_unlink(struct pg *s, struct pg_op *op)
{
	if (!op->queued)
		return;
	if (op->prev)
		op->prev->next = op->next;
	else
		s->head = op->next;
	if (op->next)
		op->next->prev = op->prev;
	else
		s->tail = op->prev;
	op->prev = op->next = NULL;
	op->queued = false;
}

static void pg_queue_append(struct pg *s, struct pg_op *op)
{
	op->prev = s->tail;
	op->next = NULL;
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	op->queued = true;
}

/* Counts a failure and records the first one's message. */
static void pg_op_fail(struct pg_op *op, const char *prefix, const char *msg)
{
	op->nerrors++;
	if (op->failed)
		return;
	op->failed = true;
	pg_err_set(op->err, prefix, msg);
}

/* A connection failure seen by an operation: the operation's own error (a
 * server message) says more, except that a timeout is reported as such. */
static void pg_op_fail_conn(struct pg_op *op, const char *err)
{
	if (op->failed && strcmp(err, "timeout") != 0) {
		op->nerrors++;
		return;
	}
	op->failed = false;
	pg_op_fail(op, NULL, err);
}

/* Copies the totals of the committed counters of a push into the batch. */
static void pg_push_totals(struct pg_op *op)
{
	for (size_t g = 0; g < op->ngroups; g++) {
		struct pg_group *gr = &op->groups[g];

		if (!gr->committed)
			continue;
		for (size_t i = gr->first; i < gr->first + gr->nmemb; i++) {
			op->order[i]->total = gr->got ? gr->total : 0.0;
			op->order[i]->ok = true;
		}
	}
}

/* Runs the callback of a finished operation (status 0 with errstr NULL,
 * or -1 with op->err), then frees it. */
static void pg_op_deliver(struct store_op *b)
{
	struct pg_op *op = container_of(b, struct pg_op, base);
	int status = op->status;

	switch (op->kind) {
	case PG_OP_PUSH:
	case PG_OP_GET:
		pg_push_totals(op);
		op->done_cb(op->arg, status, status ? op->err : NULL);
		break;
	case PG_OP_FETCH:
		if (status == 0)
			op->rows_cb(op->arg, 0, NULL, op->rows, op->nrows);
		else
			op->rows_cb(op->arg, -1, op->err, NULL, 0);
		break;
	case PG_OP_PURGE:
	case PG_OP_ADMIT:
	case PG_OP_NODES:
		op->done_cb(op->arg, status, status ? op->err : NULL);
		break;
	case PG_OP_MAINT:
	case PG_OP_PROBE:
	case PG_OP_CREATE:
	case PG_OP_COUNT:
		break;
	}
	pg_op_free(op);
}

/*
 * Ends an operation: it leaves the queue (or the active slot), its timer
 * stops and it joins the done queue (store.h): its callback runs when the
 * outermost of our libev callbacks returns, and it is freed then. No
 * connection may still work for it.
 */
static void pg_op_finish(struct pg *s, struct pg_op *op, int status)
{
	pg_queue_unlink(s, op);
	if (s->active == op)
		s->active = NULL;
	for (size_t i = 0; i < s->nconns; i++)
		if (s->conns[i].op == op) /* cannot happen; never leave a dangling one */
			pg_conn_lost(&s->conns[i], "internal error: operation ended early");
	if (s->nops > 0)
		s->nops--;
	if (status < 0 && !op->err[0])
		pg_err_set(op->err, NULL, "failed");
	if (op->kind == PG_OP_MAINT)
		s->maint_pending = false;
	op->status = status;
	store_op_finish(&op->base);
}

/* The store just answered: every operation's silence restarts. */
static void pg_progress(struct pg *s)
{
	store_activity(&s->core);
}

static bool pg_any_ready(const struct pg *s)
{
	for (size_t i = 0; i < s->nconns; i++)
		if (s->conns[i].state == PG_ST_READY)
			return true;
	return false;
}

static bool pg_all_down(const struct pg *s)
{
	for (size_t i = 0; i < s->nconns; i++)
		if (s->conns[i].state != PG_ST_DOWN)
			return false;
	return true;
}

/* Queues a validated operation (API calls only). Returns 0, or -1 with
 * errstr set and op freed. */
static int pg_submit(struct pg *s, struct pg_op *op, char errstr[STRATEGY_ERR_MAX])
{
	const char *why = NULL;

	if (s->core.destroyed)
		why = "instance is being destroyed";
	else if (s->nops >= PG_QUEUE_MAX)
		why = "queue full";
	if (why) {
		pg_err_set(errstr, NULL, why);
		pg_op_free(op);
		return -1;
	}
	if (pg_all_down(s)) {
		if (errstr)
			snprintf(errstr, STRATEGY_ERR_MAX, "not connected (%.*s)",
				 STRATEGY_ERR_MAX - 20, s->last_err);
		pg_op_free(op);
		return -1;
	}
	pg_queue_append(s, op);
	s->nops++;
	store_op_start(&s->core, &op->base, pg_op_timeout, pg_op_deliver);
	if (!s->active && pg_any_ready(s))
		store_kick(&s->core);
	return 0;
}

/* ------------------------------------------------------------------------
 * Sending. Each returns 1 (statements queued in the pipeline), 0 (nothing
 * to send: the operation is complete), -1 (libpq refused: the connection
 * is unusable) or -2 (out of memory before anything was queued).
 */

/* Sends one prepared statement with s->par[0..n) as binary parameters,
 * binary results. */
static int pg_send_prepared(struct pg_conn *c, enum pg_stmt st)
{
	struct pg *s = c->s;
	const char *values[PG_PARAMS_MAX];
	int lengths[PG_PARAMS_MAX], formats[PG_PARAMS_MAX];
	int n = pg_stmts[st].nparams;

	for (int i = 0; i < n; i++) {
		if (s->par[i].oom || s->par[i].len > INT32_MAX)
			return -2;
		values[i] = s->par[i].p;
		lengths[i] = (int)s->par[i].len;
		formats[i] = 1;
	}
	if (!PQsendQueryPrepared(c->conn, pg_stmts[st].name, n, values, lengths, formats, 1))
		return -1;
	return 1;
}

static void pg_hash_bytes(uint64_t *h, const void *p, size_t n)
{
	const unsigned char *u = p;

	for (size_t i = 0; i < n; i++)
		*h = (*h ^ u[i]) * 1099511628211u; /* FNV-1a, 64 bits */
}

static void pg_hash_u64(uint64_t *h, uint64_t v)
{
	unsigned char u[8];

	for (int i = 0; i < 8; i++)
		u[i] = (unsigned char)(v >> (56 - 8 * i));
	pg_hash_bytes(h, u, 8);
}

static void pg_hash_counter(uint64_t *h, const struct strategy_counter *c)
{
	pg_hash_u64(h, c->ns_len);
	pg_hash_bytes(h, c->ns, c->ns_len);
	pg_hash_u64(h, c->key_len);
	pg_hash_bytes(h, c->key, c->key_len);
	pg_hash_u64(h, (uint64_t)c->start);
	pg_hash_u64(h, c->size);
}

/*
 * The token of one upsert chunk: the push's token, ':', then 16 hex digits
 * hashing the chunk's row count and its first and last counters.
 *
 * Why it is stable: the caller resends exactly the counters that came
 * back with ok false, in order, with their diffs. A chunk's counters are
 * all ok or all not (its transaction committed or not), and so are the
 * members of a merged group (one row), so a resend holds whole chunks.
 * Sorted and merged again, the same groups come out in the same order,
 * and the upsert list is cut again from the start of each of them: where
 * a cut falls depends only on the rows from the chunk's start (row count
 * and bytes), so every resent chunk is cut exactly as before (the last
 * chunk of the list ended at the list's end, and still does). Chunks of
 * one push hold disjoint key ranges, so their tokens differ.
 */
static void pg_chunk_token(struct pg *s, const struct pg_op *op, const struct pg_chunk *ch)
{
	static const char hex[] = "0123456789abcdef";
	uint64_t h = 14695981039346656037u;
	char suffix[17];

	pg_hash_u64(&h, ch->hi - ch->lo);
	pg_hash_counter(&h, op->groups[op->up[ch->lo]].c);
	pg_hash_counter(&h, op->groups[op->up[ch->hi - 1]].c);
	suffix[0] = ':';
	for (int i = 0; i < 16; i++)
		suffix[1 + i] = hex[(h >> (60 - 4 * i)) & 15];
	s->tokpar.len = 0;
	s->tokpar.oom = false;
	pg_buf_put(&s->tokpar, op->token, op->token_len);
	pg_buf_put(&s->tokpar, suffix, sizeof(suffix));
}

/* Sends one chunk of a push, and a Sync: its own transaction. With a
 * token, the token statement comes first in that transaction. */
static int pg_send_chunk(struct pg_conn *c, struct pg_op *op, const struct pg_chunk *ch)
{
	struct pg *s = c->s;
	const size_t *idx = ch->upsert ? op->up : op->rd;
	size_t n = ch->hi - ch->lo;
	int r;

	pg_array_begin(&s->par[0], PG_OID_TEXT, n);
	pg_array_begin(&s->par[1], PG_OID_BYTEA, n);
	pg_array_begin(&s->par[2], PG_OID_INT8, n);
	pg_array_begin(&s->par[3], PG_OID_INT4, n);
	if (ch->upsert) {
		pg_array_begin(&s->par[4], PG_OID_FLOAT8, n);
		pg_array_begin(&s->par[5], PG_OID_FLOAT8, n);
	}
	for (size_t i = ch->lo; i < ch->hi; i++) {
		const struct pg_group *g = &op->groups[idx[i]];

		pg_array_bytes(&s->par[0], g->c->ns, g->c->ns_len);
		pg_array_bytes(&s->par[1], g->c->key, g->c->key_len);
		pg_array_i64(&s->par[2], g->c->start);
		pg_array_i32(&s->par[3], (int32_t)g->c->size);
		if (ch->upsert) {
			pg_array_f64(&s->par[4], g->diff + g->spent);
			pg_array_f64(&s->par[5], -(g->spent + g->returned));
		}
	}
	if (ch->tok) {
		const char *v[1];
		int len[1], fmt[1] = { 1 };

		pg_chunk_token(s, op, ch);
		for (int i = 0; i < 6; i++)
			if (s->par[i].oom || s->par[i].len > INT32_MAX)
				return -2; /* before anything is queued */
		if (s->tokpar.oom)
			return -2;
		v[0] = s->tokpar.p;
		len[0] = (int)s->tokpar.len;
		if (!PQsendQueryPrepared(c->conn, pg_stmts[PG_STMT_TOKEN].name, 1, v, len, fmt, 1))
			return -1;
		r = pg_send_prepared(c, PG_STMT_UPSERT_TOK);
		if (r == -2) /* cannot happen: checked above */
			r = -1;
	} else {
		r = pg_send_prepared(c, ch->upsert ? PG_STMT_UPSERT : PG_STMT_READ);
	}
	if (r > 0 && !PQpipelineSync(c->conn))
		return -1;
	return r;
}

/* Cuts a list of groups into chunks of at most PG_CHUNK_ROWS rows and
 * PG_CHUNK_BYTES bytes. Returns 0 or -1 (out of memory). */
static int pg_plan_chunks(struct pg_op *op, bool upsert, const size_t *idx, size_t n)
{
	size_t lo = 0, bytes = 0;

	for (size_t i = 0; i <= n; i++) {
		size_t row = 0;

		if (i < n) {
			const struct strategy_counter *c = op->groups[idx[i]].c;

			row = c->ns_len + c->key_len + 48;
		}
		if (i == n || i - lo == PG_CHUNK_ROWS || (i > lo && bytes + row > PG_CHUNK_BYTES)) {
			if (i > lo) {
				struct pg_chunk *ch = realloc(op->chunks,
							      (op->nchunks + 1) * sizeof(*ch));

				if (!ch)
					return -1;
				op->chunks = ch;
				ch[op->nchunks++] = (struct pg_chunk){
					.upsert = upsert, .tok = upsert && op->has_token,
					.lo = lo, .hi = i };
			}
			lo = i;
			bytes = 0;
		}
		bytes += row;
	}
	return 0;
}

/* FETCH and PURGE: namespace, sizes, starts. */
static int pg_send_windows(struct pg_conn *c, struct pg_op *op, enum pg_stmt st)
{
	struct pg *s = c->s;
	int r;

	s->par[0].len = 0;
	s->par[0].oom = false;
	pg_buf_put(&s->par[0], op->ns, op->ns_len);
	pg_array_begin(&s->par[1], PG_OID_INT4, op->nw);
	pg_array_begin(&s->par[2], PG_OID_INT8, op->nw);
	for (size_t i = 0; i < op->nw; i++) {
		pg_array_i32(&s->par[1], op->sizes[i]);
		pg_array_i64(&s->par[2], op->starts[i]);
	}
	r = pg_send_prepared(c, st);
	if (r == -2) {
		pg_op_fail(op, NULL, "out of memory");
		return 0;
	}
	if (r > 0)
		op->nstmts++;
	return r;
}

/* Deletes the tokens older than STRATEGY_TOKEN_TTL (every node's: they
 * all keep them that long). */
static int pg_send_purge_tokens(struct pg_conn *c, struct pg_op *op)
{
	if (pg_send_prepared(c, PG_STMT_PURGE_TOK) < 0)
		return -1;
	op->nstmts++;
	return 1;
}

/* The periodic purge: the tokens, then one statement per namespace seen. */
static int pg_send_maint(struct pg_conn *c, struct pg_op *op)
{
	struct pg *s = c->s;
	int64_t now = (int64_t)time(NULL);

	if (pg_send_purge_tokens(c, op) < 0) /* first: see pg_prepare_order */
		return -1;
	for (size_t i = 0; i < s->nseen; i++) {
		const struct pg_seen *sn = &s->seen[i];
		int r;

		s->par[0].len = 0;
		s->par[0].oom = false;
		pg_buf_put(&s->par[0], sn->ns, sn->ns_len);
		pg_array_begin(&s->par[1], PG_OID_INT4, sn->nsizes);
		pg_array_begin(&s->par[2], PG_OID_INT8, sn->nsizes);
		for (size_t k = 0; k < sn->nsizes; k++) {
			pg_array_i32(&s->par[1], (int32_t)sn->sizes[k]);
			pg_array_i64(&s->par[2], now - 2 * (int64_t)sn->sizes[k]);
		}
		r = pg_send_prepared(c, PG_STMT_PURGE);
		if (r == -2)
			break;
		if (r < 0)
			return -1;
		op->nstmts++;
	}
	return 1;
}

/* Set-up, step 1: do the tables exist? (Creating needs the CREATE right
 * on the schema even when the table exists; a table made by an
 * administrator must work for a user without it.) */
static int pg_send_probe(struct pg_conn *c, struct pg_op *op)
{
	const char *v[2] = { c->s->table_quoted, c->s->tokens_quoted };

	if (!PQsendQueryParams(c->conn, pg_sql_probe, 2, NULL, v, NULL, NULL, 1))
		return -1;
	op->nstmts++;
	return 1;
}

/*
 * Lock order. Every transaction that locks both tables locks the tokens
 * table first: a token chunk (insert the token, then upsert), purges
 * (tokens, then windows) and the set-up (creating: CREATE INDEX IF NOT
 * EXISTS takes a SHARE lock on its table even when the index exists;
 * preparing: an INSERT or DELETE is analysed under ROW EXCLUSIVE). In any
 * other order a connection still setting up and a push or purge on
 * another one can deadlock (until deadlock_timeout, past our timeout).
 */
static const enum pg_stmt pg_prepare_order[] = {
	PG_STMT_TOKEN, PG_STMT_PURGE_TOK, PG_STMT_UPSERT,    PG_STMT_READ,
	PG_STMT_FETCH, PG_STMT_PURGE,     PG_STMT_UPSERT_TOK,
	PG_STMT_ADMIT_ROW, PG_STMT_ADMIT, PG_STMT_ADMIT_TOK, PG_STMT_NODES,
};

/* Set-up, step 2: create the tables and indexes if missing, prepare every
 * statement. */
static int pg_send_create(struct pg_conn *c, struct pg_op *op)
{
	struct pg *s = c->s;

	if (!c->table_present) {
		const char *v[1] = { s->table_name };

		if (!PQsendQueryParams(c->conn, pg_sql_lock, 1, NULL, v, NULL, NULL, 0) ||
		    !PQsendQueryParams(c->conn, s->sql_tokens, 0, NULL, NULL, NULL, NULL, 0) ||
		    !PQsendQueryParams(c->conn, s->sql_tokens_index, 0, NULL, NULL, NULL, NULL,
				       0) ||
		    !PQsendQueryParams(c->conn, s->sql_table, 0, NULL, NULL, NULL, NULL, 0) ||
		    !PQsendQueryParams(c->conn, s->sql_reserved, 0, NULL, NULL, NULL, NULL, 0) ||
		    !PQsendQueryParams(c->conn, s->sql_index, 0, NULL, NULL, NULL, NULL, 0))
			return -1;
		op->nstmts += 6;
	}
	for (size_t i = 0; i < sizeof(pg_prepare_order) / sizeof(pg_prepare_order[0]); i++) {
		enum pg_stmt k = pg_prepare_order[i];

		if (!PQsendPrepare(c->conn, pg_stmts[k].name, s->sql[k], pg_stmts[k].nparams,
				   pg_stmts[k].types))
			return -1;
		op->nstmts++;
	}
	return 1;
}

/* Sends a whole operation (not a push) and its Sync: one transaction. */
static int pg_send_nodes(struct pg_conn *c, struct pg_op *op)
{
	struct pg *s = c->s;

	for (int i = 0; i < 4; i++) {
		s->par[i].len = 0;
		s->par[i].oom = false;
	}
	/* "\x01nodes:<ns>\x01": from, this node, and the end of the range. */
	pg_buf_put(&s->par[0], "\1nodes:", 7);
	pg_buf_put(&s->par[0], op->ns, op->ns_len);
	pg_buf_put(&s->par[0], "\1", 1);
	pg_buf_put(&s->par[1], s->par[0].p, s->par[0].len);
	pg_buf_put(&s->par[1], op->node, op->node_len);
	pg_buf_put(&s->par[2], s->par[0].p, s->par[0].len - 1);
	pg_buf_put(&s->par[2], "\2", 1);
	pg_buf_f64(&s->par[3], op->ttl);
	if (pg_send_prepared(c, PG_STMT_NODES) < 0)
		return -1;
	op->nstmts++;
	return 1;
}

/* Statements per admission: [rl_token,] rl_admit_row, rl_admit[_tok]. */
static size_t pg_admit_stmts(const struct pg_op *op)
{
	return op->has_token ? 3 : 2;
}

/* The parameters of admission a, for rl_admit_row (4) and rl_admit (11). */
static void pg_admit_params(struct pg *s, const struct strategy_admit *a)
{
	for (int i = 0; i < 11; i++) {
		s->par[i].len = 0;
		s->par[i].oom = false;
	}
	pg_buf_put(&s->par[0], a->ns, a->ns_len);
	pg_buf_put(&s->par[1], a->key, a->key_len);
	pg_buf_u64(&s->par[2], (uint64_t)a->start);
	pg_buf_u32(&s->par[3], a->size);
	pg_buf_f64(&s->par[4], a->diff);
	pg_buf_f64(&s->par[5], a->cost);
	pg_buf_f64(&s->par[6], a->limit);
	pg_buf_f64(&s->par[7], a->weight);
	pg_buf_put(&s->par[8], a->count_denied ? "\1" : "\0", 1);
	pg_buf_f64(&s->par[9], a->want);
	pg_buf_u32(&s->par[10], a->nodes > INT32_MAX ? INT32_MAX : a->nodes);
}

/* Each admission in its own transaction (its row is locked until its
 * Sync: one row per transaction, so two nodes' batches cannot deadlock):
 * with a token, rl_token with the admission's token first. */
static int pg_send_admits(struct pg_conn *c, struct pg_op *op)
{
	struct pg *s = c->s;
	char tok[STRATEGY_TOKEN_MAX + 1 + 16];

	if (op->n == 0)
		return 0;
	for (size_t i = 0; i < op->n; i++) {
		size_t tl = 0;

		if (op->has_token) {
			/* The admission's token: the call's, ':', 16 hex digits. */
			static const char hex[] = "0123456789abcdef";

			memcpy(tok, op->token, op->token_len);
			tok[op->token_len] = ':';
			for (int k = 0; k < 16; k++)
				tok[op->token_len + 1 + k] = hex[(op->adm_ids[i] >> (60 - 4 * k)) & 15];
			tl = op->token_len + 17;
			s->par[0].len = 0;
			s->par[0].oom = false;
			pg_buf_put(&s->par[0], tok, tl);
			if (pg_send_prepared(c, PG_STMT_TOKEN) < 0)
				return -1;
			op->nstmts++;
		}
		pg_admit_params(s, &op->admits[i]);
		if (pg_send_prepared(c, PG_STMT_ADMIT_ROW) < 0)
			return -1;
		op->nstmts++;
		if (op->has_token) {
			s->par[11].len = 0;
			s->par[11].oom = false;
			pg_buf_put(&s->par[11], tok, tl);
		}
		if (pg_send_prepared(c, op->has_token ? PG_STMT_ADMIT_TOK : PG_STMT_ADMIT) < 0)
			return -1;
		op->nstmts++;
		if (!PQpipelineSync(c->conn))
			return -1;
		op->nsyncs++;
	}
	return 1;
}

static int pg_op_send(struct pg_conn *c, struct pg_op *op)
{
	int r = -1;

	switch (op->kind) {
	case PG_OP_FETCH:
		r = pg_send_windows(c, op, PG_STMT_FETCH);
		break;
	case PG_OP_PURGE:
		/* Tokens first (see pg_prepare_order). Windows not sent
		 * (out of memory, op failed): the Sync still ends it. */
		r = pg_send_purge_tokens(c, op);
		if (r > 0 && pg_send_windows(c, op, PG_STMT_PURGE) < 0)
			r = -1;
		break;
	case PG_OP_MAINT:
		r = pg_send_maint(c, op);
		break;
	case PG_OP_PROBE:
		r = pg_send_probe(c, op);
		break;
	case PG_OP_CREATE:
		r = pg_send_create(c, op);
		break;
	case PG_OP_ADMIT:
		return pg_send_admits(c, op);   /* a Sync after each */
	case PG_OP_NODES:
		r = pg_send_nodes(c, op);
		break;
	case PG_OP_PUSH:
	case PG_OP_GET:
	case PG_OP_COUNT:
		break;
	}
	if (r > 0) {
		if (!PQpipelineSync(c->conn))
			return -1;
		op->nsyncs = 1;
	}
	return r;
}

/* Flushes what libpq holds; watches for writability while some is left.
 * Returns 0 or -1 (connection broken). */
static int pg_flush(struct pg_conn *c)
{
	int r = PQflush(c->conn);

	if (r < 0)
		return -1;
	pg_ev_want(&c->ev, true, r == 1);
	return 0;
}

/* Starts a set-up step on c. No user callback runs. */
static void pg_setup_start(struct pg_conn *c, enum pg_op_kind kind)
{
	struct pg_op *op = pg_op_new(c->s, kind);
	int r;

	if (!op) {
		pg_conn_lost(c, "out of memory");
		return;
	}
	c->setup = op;
	r = pg_op_send(c, op);
	if (r <= 0 || pg_flush(c) < 0)
		pg_conn_lost(c, PQerrorMessage(c->conn));
}

/* Gives ready connections chunks of the active push, PG_CONN_DEPTH each at
 * most. No user callback runs. */
static void pg_feed_push(struct pg *s, struct pg_op *op)
{
	for (size_t i = 0; i < s->nconns && op->next_chunk < op->nchunks; i++) {
		struct pg_conn *c = &s->conns[i];
		bool sent = false;

		if (c->state != PG_ST_READY || (c->op && c->op != op))
			continue;
		while (c->state == PG_ST_READY && op->next_chunk < op->nchunks &&
		       c->nfifo < PG_CONN_DEPTH) {
			size_t k = op->next_chunk++;
			struct pg_chunk *ch = &op->chunks[k];
			int r = pg_send_chunk(c, op, ch);

			if (r > 0) {
				c->fifo[c->nfifo++] = k;
				c->op = op;
				sent = true;
				continue;
			}
			/* Not sent (r == -2: nothing queued), or sent in part on
			 * a broken connection (never retried elsewhere: it might
			 * have committed). */
			ch->failed = ch->done = true;
			op->chunks_done++;
			if (r == -2) {
				pg_op_fail(op, NULL, "out of memory");
				continue;
			}
			pg_conn_lost(c, PQerrorMessage(c->conn));
		}
		if (sent && c->state == PG_ST_READY && pg_flush(c) < 0)
			pg_conn_lost(c, PQerrorMessage(c->conn));
	}
}

/* Sends a whole operation on an idle ready connection, if there is one. */
static void pg_start_whole(struct pg *s, struct pg_op *op)
{
	for (size_t i = 0; i < s->nconns; i++) {
		struct pg_conn *c = &s->conns[i];
		int r;

		if (c->state != PG_ST_READY || c->op)
			continue;
		op->started = true;
		r = pg_op_send(c, op);
		if (r == 0) {
			op->ended = true;
			return;
		}
		c->op = op;
		if (r < 0 || pg_flush(c) < 0)
			pg_conn_lost(c, op->failed ? op->err : PQerrorMessage(c->conn));
		return;
	}
}

/* Finishes the active operation if nothing more can happen to it. */
static void pg_settle(struct pg *s)
{
	struct pg_op *op = s->active;

	if (!op || s->core.destroyed)
		return;
	if (pg_op_is_push(op) ? op->chunks_done < op->nchunks : !op->ended)
		return;
	pg_op_finish(s, op, op->failed ? -1 : 0);
}

/* Finishes what is complete and starts what can start: the head of the
 * queue becomes active once a connection is ready. Operations run one at
 * a time, in order; a push uses every ready connection. Call only from a
 * libev callback (user callbacks may run). */
static void pg_dispatch(struct pg *s)
{
	while (!s->core.destroyed) {
		struct pg_op *op;

		pg_settle(s);
		if (s->core.destroyed)
			return;
		op = s->active;
		if (!op) {
			if (s->head && pg_all_down(s)) {
				/* Every connection failed (a set-up refused, the
				 * server gone) and waits for its reconnect: what is
				 * queued fails now with the reason, as a new
				 * operation would, rather than at its timeout. */
				op = s->head;
				pg_err_set(op->err, "not connected: ", s->last_err);
				op->failed = true;
				pg_op_finish(s, op, -1);
				continue;
			}
			if (!s->head || !pg_any_ready(s))
				return;
			op = s->head;
			pg_queue_unlink(s, op);
			s->active = op;
			continue; /* an empty push settles at once */
		}
		if (pg_op_is_push(op)) {
			pg_feed_push(s, op);
			if (op->chunks_done < op->nchunks)
				return;
		} else {
			if (!op->started)
				pg_start_whole(s, op);
			if (!op->ended)
				return;
		}
	}
}

/* ------------------------------------------------------------------------
 * Results.
 */

/* Finds the group of a returned row among idx[lo..hi) (sorted): first at
 * position lo + row (rows come back in order in practice), else by binary
 * search. Returns the group or NULL. */
static struct pg_group *pg_match(struct pg_op *op, const struct pg_chunk *ch, size_t row,
				 const char *ns, size_t ns_len, const char *key, size_t key_len,
				 int64_t start, uint32_t size)
{
	const size_t *idx = ch->upsert ? op->up : op->rd;
	size_t lo = ch->lo, hi = ch->hi;

	if (lo + row < hi) {
		struct pg_group *g = &op->groups[idx[lo + row]];

		if (!pg_cmp_ident(ns, ns_len, size, start, key, key_len, g->c))
			return g;
	}
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		struct pg_group *g = &op->groups[idx[mid]];
		int c = pg_cmp_ident(ns, ns_len, size, start, key, key_len, g->c);

		if (!c)
			return g;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* Rows of an upsert or read chunk: namespace, key, start, size, count.
 * Returns 0 or -1 (op failed). */
static int pg_on_push_result(struct pg_op *op, const PGresult *r, const struct pg_chunk *ch)
{
	static const Oid cols[5] = { PG_OID_TEXT, PG_OID_BYTEA, PG_OID_INT8, PG_OID_INT4,
				     PG_OID_FLOAT8 };
	int nrows = PQntuples(r);

	if (pg_check_cols(r, cols, 5) < 0 || nrows < 0 || (size_t)nrows > ch->hi - ch->lo) {
		pg_op_fail(op, NULL, "unexpected result shape");
		return -1;
	}
	for (int i = 0; i < nrows; i++) {
		int ns_len = 0, key_len = 0;
		const char *ns = pg_value(r, i, 0, -1, &ns_len);
		const char *key = pg_value(r, i, 1, -1, &key_len);
		const char *start = pg_value(r, i, 2, 8, NULL);
		const char *size = pg_value(r, i, 3, 4, NULL);
		const char *count = pg_value(r, i, 4, 8, NULL);
		struct pg_group *g;

		if (!ns || !key || !start || !size || !count) {
			pg_op_fail(op, NULL, "unexpected result shape");
			return -1;
		}
		g = pg_match(op, ch, (size_t)i, ns, (size_t)ns_len, key, (size_t)key_len,
			     (int64_t)pg_get_u64(start), pg_get_u32(size));
		if (!g || g->got) {
			pg_op_fail(op, NULL, "unexpected row in result");
			return -1;
		}
		g->total = pg_get_f64(count);
		g->got = true;
	}
	return 0;
}

/* Rows of a fetch: key, start, size, count. Keeps the result. */
static void pg_on_fetch_result(struct pg_op *op, PGresult *r)
{
	static const Oid cols[4] = { PG_OID_BYTEA, PG_OID_INT8, PG_OID_INT4, PG_OID_FLOAT8 };
	int nrows = PQntuples(r);

	if (op->res || pg_check_cols(r, cols, 4) < 0 || nrows < 0) {
		pg_op_fail(op, NULL, "unexpected result shape");
		PQclear(r);
		return;
	}
	op->res = r;
	op->rows = calloc(nrows ? (size_t)nrows : 1, sizeof(*op->rows));
	if (!op->rows) {
		pg_op_fail(op, NULL, "out of memory");
		return;
	}
	for (int i = 0; i < nrows; i++) {
		int key_len = 0;
		const char *key = pg_value(r, i, 0, -1, &key_len);
		const char *start = pg_value(r, i, 1, 8, NULL);
		const char *size = pg_value(r, i, 2, 4, NULL);
		const char *count = pg_value(r, i, 3, 8, NULL);

		if (!key || !start || !size || !count) {
			pg_op_fail(op, NULL, "unexpected result shape");
			return;
		}
		op->rows[i] = (struct strategy_row){
			.key = key,
			.key_len = (size_t)key_len,
			.start = (int64_t)pg_get_u64(start),
			.size = pg_get_u32(size),
			.count = pg_get_f64(count),
		};
	}
	op->nrows = (size_t)nrows;
}

/* An error result's message, or why a status is unexpected, into op. */
static void pg_op_fail_result(struct pg_conn *c, struct pg_op *op, const PGresult *r)
{
	ExecStatusType st = PQresultStatus(r);
	char msg[STRATEGY_ERR_MAX];

	if (st == PGRES_PIPELINE_ABORTED) {
		pg_op_fail(op, NULL, "pipeline aborted");
	} else if (st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR) {
		pg_err_result(msg, r, c->conn);
		pg_op_fail(op, NULL, msg);
	} else {
		pg_op_fail(op, "unexpected result: ", PQresStatus(st));
	}
}

/* Result i of an admission op: the admissions are independent
 * transactions, so one that fails (its statements then come back
 * "aborted") fails the op but not the others. Only rl_admit's row says
 * anything: (count, previous, admitted, grant). Takes r. */
static void pg_on_admit_result(struct pg_conn *c, struct pg_op *op, PGresult *r, size_t i)
{
	static const Oid cols[4] = { PG_OID_FLOAT8, PG_OID_FLOAT8, PG_OID_BOOL, PG_OID_FLOAT8 };
	ExecStatusType st = PQresultStatus(r);
	size_t per = pg_admit_stmts(op);
	struct strategy_admit *a = &op->admits[i / per];
	const char *cur, *prev, *adm, *grant;

	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
		pg_op_fail_result(c, op, r);
	} else if (i % per == per - 1) {
		if (st != PGRES_TUPLES_OK || pg_check_cols(r, cols, 4) < 0 || PQntuples(r) != 1 ||
		    !(cur = pg_value(r, 0, 0, 8, NULL)) || !(prev = pg_value(r, 0, 1, 8, NULL)) ||
		    !(adm = pg_value(r, 0, 2, 1, NULL)) || !(grant = pg_value(r, 0, 3, 8, NULL)) ||
		    !(pg_get_f64(grant) >= 0)) {
			pg_op_fail(op, NULL, "unexpected result shape");
		} else {
			a->current = pg_get_f64(cur);
			a->previous = pg_get_f64(prev);
			a->admitted = *adm != 0;
			a->grant = pg_get_f64(grant);
			a->ok = true;
		}
	}
	PQclear(r);
}

/* One statement's result for a whole operation (set-up included). Takes r. */
static void pg_on_result(struct pg_conn *c, struct pg_op *op, PGresult *r)
{
	ExecStatusType st = PQresultStatus(r);
	size_t i = op->nres++;

	if (i >= op->nstmts) {
		pg_op_fail(op, NULL, "unexpected result");
		PQclear(r);
		return;
	}
	if (op->kind == PG_OP_ADMIT) {
		pg_on_admit_result(c, op, r, i);
		return;
	}
	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
		pg_op_fail_result(c, op, r);
		PQclear(r);
		return;
	}
	if (op->failed) {
		PQclear(r);
		return;
	}
	switch (op->kind) {
	case PG_OP_FETCH:
		if (st != PGRES_TUPLES_OK) {
			pg_op_fail(op, NULL, "unexpected result shape");
			break;
		}
		pg_on_fetch_result(op, r);
		return; /* r kept (or freed) there */
	case PG_OP_PROBE: {
		static const Oid cols[1] = { PG_OID_BOOL };
		const char *v;

		if (pg_check_cols(r, cols, 1) < 0 || PQntuples(r) != 1 ||
		    !(v = pg_value(r, 0, 0, 1, NULL)))
			pg_op_fail(op, NULL, "unexpected result shape");
		else
			c->table_present = *v != 0;
		break;
	}
	case PG_OP_NODES: {
		static const Oid cols[1] = { PG_OID_INT8 };
		const char *v;

		if (pg_check_cols(r, cols, 1) < 0 || PQntuples(r) != 1 ||
		    !(v = pg_value(r, 0, 0, 8, NULL)))
			pg_op_fail(op, NULL, "unexpected result shape");
		else
			*op->active = (unsigned)(pg_get_u64(v) > UINT_MAX ? UINT_MAX
									 : pg_get_u64(v));
		break;
	}
	case PG_OP_PUSH:
	case PG_OP_GET:
	case PG_OP_PURGE:
	case PG_OP_MAINT:
	case PG_OP_CREATE:
	case PG_OP_ADMIT:
	case PG_OP_COUNT:
		break;
	}
	PQclear(r);
}

/* A result on a connection working for a push: for its oldest chunk in
 * flight. At the chunk's Sync, its transaction is over: if nothing failed,
 * it committed and its counters are final. Takes r. Returns 0, or -1 when
 * no chunk is in flight (the connection cannot be trusted). */
static int pg_on_chunk_result(struct pg_conn *c, PGresult *r)
{
	struct pg_op *op = c->op;
	ExecStatusType st = PQresultStatus(r);
	struct pg_chunk *ch;

	if (c->nfifo == 0) {
		PQclear(r);
		return -1;
	}
	ch = &op->chunks[c->fifo[0]];
	if (st != PGRES_PIPELINE_SYNC && ch->tok && !ch->got_flag) {
		/* The token statement: 'y' (new: the diffs are added) or 'n'
		 * (applied before: 0 is added, the totals come back). */
		static const Oid cols[1] = { PG_OID_TEXT };
		const char *v = NULL;

		ch->got_flag = true;
		if (!ch->failed && st != PGRES_TUPLES_OK) {
			pg_op_fail_result(c, op, r);
			ch->failed = true;
		} else if (!ch->failed) {
			if (pg_check_cols(r, cols, 1) == 0 && PQntuples(r) == 1)
				v = pg_value(r, 0, 0, 1, NULL);
			if (!v || (*v != 'y' && *v != 'n')) {
				pg_op_fail(op, NULL, "unexpected result shape");
				ch->failed = true;
			}
		}
		PQclear(r);
		return 0;
	}
	if (st != PGRES_PIPELINE_SYNC) {
		if (st == PGRES_TUPLES_OK && !ch->got_result && !ch->failed) {
			if (pg_on_push_result(op, r, ch) < 0)
				ch->failed = true;
		} else if (!ch->failed) {
			/* An error (a failed commit comes after the rows), or
			 * a second result. */
			if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
				pg_op_fail(op, NULL, "unexpected result");
			else
				pg_op_fail_result(c, op, r);
			ch->failed = true;
		}
		ch->got_result = true;
		PQclear(r);
		return 0;
	}
	PQclear(r);
	memmove(c->fifo, c->fifo + 1, (c->nfifo - 1) * sizeof(c->fifo[0]));
	if (--c->nfifo == 0)
		c->op = NULL;
	if (!ch->failed && (!ch->got_result || (ch->tok && !ch->got_flag))) {
		pg_op_fail(op, NULL, "unexpected result count");
		ch->failed = true;
	}
	if (!ch->failed && ch->upsert) {
		for (size_t i = ch->lo; i < ch->hi; i++)
			if (!op->groups[op->up[i]].got) {
				/* Written, but without its total it cannot be
				 * reported as done. */
				pg_op_fail(op, NULL, "upsert returned no row for a counter");
				ch->failed = true;
				break;
			}
	}
	if (!ch->failed) {
		const size_t *idx = ch->upsert ? op->up : op->rd;

		for (size_t i = ch->lo; i < ch->hi; i++)
			op->groups[idx[i]].committed = true;
	}
	ch->done = true;
	op->chunks_done++;
	return 0;
}

/* A set-up step ended: next step, or ready, or dropped. */
static void pg_setup_done(struct pg_conn *c)
{
	struct pg *s = c->s;
	struct pg_op *op = c->setup;
	char err[STRATEGY_ERR_MAX];
	enum pg_op_kind kind = op->kind;
	bool failed = op->failed || op->nres != op->nstmts;

	snprintf(err, sizeof(err), "%s", op->failed ? op->err : "unexpected result count");
	c->setup = NULL;
	pg_op_free(op);
	if (failed) {
		pg_conn_lost(c, err);
		return;
	}
	if (kind == PG_OP_PROBE) {
		pg_setup_start(c, PG_OP_CREATE);
		return;
	}
	c->state = PG_ST_READY;
	store_backoff_reset(&c->backoff);
	s->last_err[0] = '\0';
	ev_timer_stop(s->loop, &c->conn_timer);
}

/* Reads every complete result of c. Stops when nothing more is available,
 * when c has nothing in flight, or when the instance is destroyed. No user
 * callback runs here: operations are finished by pg_dispatch(). */
static void pg_read_results(struct pg_conn *c)
{
	struct pg *s = c->s;
	int nulls = 0;

	while (!s->core.destroyed && c->conn && (c->setup || c->op) && !PQisBusy(c->conn)) {
		PGresult *r = PQgetResult(c->conn);
		ExecStatusType st;
		struct pg_op *op;

		if (!r) {
			/* End of one statement's results; two in a row means
			 * libpq has nothing more for now. */
			if (++nulls > 1)
				break;
			continue;
		}
		nulls = 0;
		pg_progress(s);
		st = PQresultStatus(r);
		if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
			/* Never asked for; the connection cannot be trusted. */
			PQclear(r);
			pg_conn_lost(c, "unexpected COPY from the server");
			return;
		}
		if (!c->setup && pg_op_is_push(c->op)) {
			if (pg_on_chunk_result(c, r) < 0)
				pg_conn_lost(c, "unexpected result");
			continue;
		}
		op = c->setup ? c->setup : c->op;
		if (st != PGRES_PIPELINE_SYNC) {
			pg_on_result(c, op, r);
			continue;
		}
		PQclear(r);
		if (++op->nsynced < op->nsyncs)
			continue;
		if (c->setup) {
			pg_setup_done(c);
			continue;
		}
		if (!op->failed && op->nres != op->nstmts)
			pg_op_fail(op, NULL, "unexpected result count");
		op->ended = true;
		c->op = NULL;
	}
}

/* ------------------------------------------------------------------------
 * Connections.
 */
static void pg_notice_ignore(void *arg, const PGresult *r)
{
	(void)arg;
	(void)r;
}

/* Tears c down and arms its reconnect timer. What it carried for the
 * active operation fails with why (push chunks in flight: their outcome is
 * unknown, they are not retried); pg_dispatch() finishes the operation.
 * No user callback runs. */
static void pg_conn_lost(struct pg_conn *c, const char *why)
{
	struct pg *s = c->s;
	struct pg_op *op = c->op;
	char err[STRATEGY_ERR_MAX];

	pg_err_set(err, NULL, why);
	if (c->setup) {
		pg_op_free(c->setup);
		c->setup = NULL;
	}
	if (op) {
		if (pg_op_is_push(op)) {
			for (size_t i = 0; i < c->nfifo; i++) {
				struct pg_chunk *ch = &op->chunks[c->fifo[i]];

				if (!ch->done) {
					ch->failed = ch->done = true;
					op->chunks_done++;
				}
			}
		} else {
			op->ended = true;
		}
		pg_op_fail_conn(op, err);
	}
	c->op = NULL;
	c->nfifo = 0;
	ev_timer_stop(s->loop, &c->conn_timer);
	pg_ev_detach(&c->ev);
	if (c->conn)
		PQfinish(c->conn);
	c->conn = NULL;
	c->state = PG_ST_DOWN;
	snprintf(s->last_err, sizeof(s->last_err), "%s", err);
	ev_timer_stop(s->loop, &c->reconnect);
	ev_timer_set(&c->reconnect, store_backoff_take(&c->backoff), 0.);
	ev_timer_start(s->loop, &c->reconnect);
}

/* CONNECTION_OK: non-blocking, pipeline mode, then the set-up. */
static void pg_connected(struct pg_conn *c)
{
	if (PQsetnonblocking(c->conn, 1) != 0 || !PQenterPipelineMode(c->conn)) {
		pg_conn_lost(c, PQerrorMessage(c->conn));
		return;
	}
	c->state = PG_ST_SETUP;
	pg_ev_want(&c->ev, true, false);
	pg_setup_start(c, PG_OP_PROBE);
}

static void pg_on_io(struct pg_ev *e, int revents)
{
	struct pg_conn *c = container_of(e, struct pg_conn, ev);
	struct pg *s = c->s;

	pg_enter(s);
	if (c->state == PG_ST_CONNECTING) {
		PostgresPollingStatusType st = PQconnectPoll(c->conn);

		pg_ev_resync(&c->ev);
		switch (st) {
		case PGRES_POLLING_READING:
			pg_ev_want(&c->ev, true, false);
			break;
		case PGRES_POLLING_WRITING:
			pg_ev_want(&c->ev, false, true);
			break;
		case PGRES_POLLING_OK:
			pg_connected(c);
			break;
		case PGRES_POLLING_FAILED:
		default:
			pg_conn_lost(c, PQerrorMessage(c->conn));
			break;
		}
	} else if ((c->state == PG_ST_SETUP || c->state == PG_ST_READY) && c->conn) {
		if ((revents & EV_WRITE) && pg_flush(c) < 0) {
			pg_conn_lost(c, PQerrorMessage(c->conn));
		} else if (revents & EV_READ) {
			if (!PQconsumeInput(c->conn)) {
				pg_conn_lost(c, PQerrorMessage(c->conn));
			} else {
				/* Bytes from the store: it is alive (a big
				 * result arrives in many reads before
				 * PQgetResult has it). */
				pg_progress(s);
				if (c->ev.writing && pg_flush(c) < 0)
					pg_conn_lost(c, PQerrorMessage(c->conn));
				else
					pg_read_results(c);
				if (c->conn && PQstatus(c->conn) == CONNECTION_BAD)
					pg_conn_lost(c, PQerrorMessage(c->conn));
			}
		}
	}
	pg_dispatch(s);
	pg_leave(s);
}

/* Starts a connection attempt (from create() or the reconnect timer). */
static void pg_connect_start(struct pg_conn *c)
{
	struct pg *s = c->s;

	/* dbname with expand_dbname: the whole conninfo (or URI) goes there. */
	static const char *const keys[] = { "dbname", "fallback_application_name", NULL };
	const char *values[] = { s->conninfo, "spoa-ratelimit", NULL };

	c->conn = PQconnectStartParams(keys, values, 1);
	if (!c->conn) {
		pg_conn_lost(c, "out of memory");
		return;
	}
	PQsetNoticeReceiver(c->conn, pg_notice_ignore, NULL);
	if (PQstatus(c->conn) == CONNECTION_BAD) {
		pg_conn_lost(c, PQerrorMessage(c->conn));
		return;
	}
	c->state = PG_ST_CONNECTING;
	c->table_present = false;
	pg_ev_attach(&c->ev, s->loop, c->conn, pg_on_io);
	pg_ev_want(&c->ev, false, true);
	ev_timer_stop(s->loop, &c->conn_timer);
	ev_timer_set(&c->conn_timer, s->timeout, 0.);
	ev_timer_start(s->loop, &c->conn_timer);
}

static void pg_on_reconnect(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pg_conn *c = container_of(w, struct pg_conn, reconnect);
	struct pg *s = c->s;

	(void)loop;
	(void)revents;
	pg_enter(s);
	pg_connect_start(c);
	pg_leave(s);
}

static void pg_on_conn_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pg_conn *c = container_of(w, struct pg_conn, conn_timer);
	struct pg *s = c->s;

	(void)loop;
	(void)revents;
	pg_enter(s);
	pg_conn_lost(c, c->state == PG_ST_SETUP ? "timeout setting up the table"
						: "timeout connecting");
	pg_dispatch(s);
	pg_leave(s);
}

/* The kick (store.h; inside its enter/leave): starts what can start. */
static void pg_on_kick(struct store_core *c)
{
	pg_dispatch(container_of(c, struct pg, core));
}

/* The store was silent for timeout_ms. For the active operation the whole
 * pool is dropped: the store is not answering, the idle connections would
 * not fare better (and ready() must say so). A waiting operation fails
 * alone. */
static void pg_op_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pg_op *op = container_of(w, struct pg_op, base.timer);
	struct pg *s = op->s;

	(void)loop;
	(void)revents;
	if (!store_op_silent(&op->base))
		return;
	pg_enter(s);
	if (s->active == op) {
		for (size_t i = 0; i < s->nconns; i++)
			if (s->conns[i].state != PG_ST_DOWN)
				pg_conn_lost(&s->conns[i], "timeout");
		pg_op_fail_conn(op, "timeout");
	} else {
		pg_err_set(op->err, NULL, "timeout");
	}
	pg_op_finish(s, op, -1);
	pg_dispatch(s);
	pg_leave(s);
}

/* Remembers (ns, size) for the periodic purge; silently bounded. */
static void pg_seen_note(struct pg *s, const char *ns, size_t ns_len, uint32_t size)
{
	struct pg_seen *sn = NULL;

	for (size_t i = 0; i < s->nseen; i++)
		if (!pg_cmp_bytes(s->seen[i].ns, s->seen[i].ns_len, ns, ns_len)) {
			sn = &s->seen[i];
			break;
		}
	if (!sn) {
		if (s->nseen == PG_SEEN_MAX)
			return;
		sn = &s->seen[s->nseen];
		sn->ns = malloc(ns_len ? ns_len : 1);
		if (!sn->ns)
			return;
		if (ns_len)
			memcpy(sn->ns, ns, ns_len);
		sn->ns_len = ns_len;
		sn->nsizes = 0;
		s->nseen++;
	}
	for (size_t k = 0; k < sn->nsizes; k++)
		if (sn->sizes[k] == size)
			return;
	if (sn->nsizes < PG_SEEN_SIZES)
		sn->sizes[sn->nsizes++] = size;
}

static void pg_on_maint(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pg *s = container_of(w, struct pg, maint);
	struct pg_op *op;

	(void)loop;
	(void)revents;
	if (!pg_any_ready(s) || s->maint_pending || !s->nseen || s->nops >= PG_QUEUE_MAX)
		return;
	op = pg_op_new(s, PG_OP_MAINT);
	if (!op)
		return;
	s->maint_pending = true;
	pg_enter(s);
	if (pg_submit(s, op, NULL) < 0)
		s->maint_pending = false;
	pg_leave(s);
}

/* ------------------------------------------------------------------------
 * Options and creation.
 */

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
static void pg_derived_name(const char *table, const char *suffix, char *out, size_t outlen)
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

struct pg_opts {
	const char *conninfo;
	const char *table;
	long long timeout_ms;
	long long purge_s;
	long long pool_size;
};

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
static int pg_opts_load(const char *opts_json, struct pg_opts *o, json_t **root, char *err,
			size_t errlen)
{
	*o = (struct pg_opts){ PG_DEFAULT_CONNINFO, PG_DEFAULT_TABLE, PG_DEFAULT_TIMEOUT,
			       PG_DEFAULT_PURGE, PG_POOL_DEFAULT };
	if (store_opts_load(opts_json, root, err, errlen) < 0 ||
	    (*root && pg_opts_parse(*root, o, err, errlen) < 0))
		return -1;
	return pg_conninfo_check(o->conninfo, err, errlen);
}

static int pg_check_opts(const char *opts_json, char *err, size_t errlen)
{
	struct pg_opts o;
	json_t *root;
	int rc = pg_opts_load(opts_json, &o, &root, err, errlen);

	json_decref(root);
	return rc;
}

static struct strategy *pg_create(struct ev_loop *loop, const char *opts_json, char *err,
				  size_t errlen)
{
	struct pg_opts o;
	char index[PG_IDENT_MAX + 3], tokens_index[PG_IDENT_MAX + 3];
	const char *names[4];
	json_t *root = NULL;
	struct pg *s;
	bool oom = false;
	char dummy[8];

	if (!err || !errlen) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	err[0] = '\0';
	if (!loop) {
		snprintf(err, errlen, "no event loop");
		return NULL;
	}
	if (pg_opts_load(opts_json, &o, &root, err, errlen) < 0) {
		json_decref(root);
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		json_decref(root);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->loop = loop;
	s->timeout = (double)o.timeout_ms / 1000.0;
	s->purge_interval = (double)o.purge_s;
	s->nconns = (size_t)o.pool_size;
	s->conninfo = strdup(o.conninfo);
	snprintf(s->table_name, sizeof(s->table_name), "%s", o.table);
	snprintf(s->table_quoted, sizeof(s->table_quoted), "\"%s\"", o.table);
	json_decref(root);
	pg_derived_name(s->table_name, "_ns_start_idx", index, sizeof(index));
	pg_derived_name(s->table_name, "_tokens", s->tokens_quoted, sizeof(s->tokens_quoted));
	pg_derived_name(s->table_name, "_tokens_at_idx", tokens_index, sizeof(tokens_index));
	names[0] = s->table_quoted;
	names[1] = index;
	names[2] = s->tokens_quoted;
	names[3] = tokens_index;
	for (int i = 0; i < PG_STMT_COUNT; i++) {
		s->sql[i] = pg_sql_fill(pg_stmts[i].sql, names);
		oom = oom || !s->sql[i];
	}
	s->sql_table = pg_sql_fill(pg_tpl_table, names);
	s->sql_reserved = pg_sql_fill(pg_tpl_reserved, names);
	s->sql_index = pg_sql_fill(pg_tpl_index, names);
	s->sql_tokens = pg_sql_fill(pg_tpl_tokens, names);
	s->sql_tokens_index = pg_sql_fill(pg_tpl_tokens_index, names);
	if (oom || !s->conninfo || !s->sql_table || !s->sql_reserved || !s->sql_index ||
	    !s->sql_tokens ||
	    !s->sql_tokens_index) {
		pg_free(s);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	store_core_init(&s->core, loop, s->timeout, pg_on_kick, pg_core_free);
	ev_timer_init(&s->maint, pg_on_maint, s->purge_interval, s->purge_interval);
	if (s->purge_interval > 0)
		ev_timer_start(loop, &s->maint);
	snprintf(s->last_err, sizeof(s->last_err), "connecting");
	for (size_t i = 0; i < s->nconns; i++) {
		struct pg_conn *c = &s->conns[i];

		c->s = s;
		store_backoff_init(&c->backoff, PG_BACKOFF_MIN, PG_BACKOFF_MAX);
		c->ev.fd = -1;
		ev_timer_init(&c->reconnect, pg_on_reconnect, 0., 0.);
		ev_timer_init(&c->conn_timer, pg_on_conn_timeout, 0., 0.);
		pg_connect_start(c);
	}
	return (struct strategy *)(void *)s;
}

/* ------------------------------------------------------------------------
 * The operations.
 */
static struct pg *pg_of(struct strategy *st)
{
	return (struct pg *)(void *)st;
}

static void pg_destroy(struct strategy *st)
{
	struct pg *s = pg_of(st);
	struct pg_op *op;

	if (!s || s->core.destroyed)
		return;
	s->core.destroyed = true;         /* refuses new operations from now on */
	ev_timer_stop(s->loop, &s->maint);
	for (size_t i = 0; i < s->nconns; i++) {
		struct pg_conn *c = &s->conns[i];

		ev_timer_stop(s->loop, &c->reconnect);
		ev_timer_stop(s->loop, &c->conn_timer);
		pg_ev_detach(&c->ev);
		if (c->conn)
			PQfinish(c->conn);
		c->conn = NULL;
		if (c->setup)
			pg_op_free(c->setup);
		c->setup = NULL;
		c->op = NULL;
		c->nfifo = 0;
		c->state = PG_ST_DOWN;
	}
	if ((op = s->active)) {
		pg_op_fail_conn(op, "destroyed");
		pg_op_finish(s, op, -1);
	}
	while ((op = s->head)) {
		pg_err_set(op->err, NULL, "destroyed");
		pg_op_finish(s, op, -1);
	}
	/* Their callbacks run now; the instance is freed now, or when the
	 * callback of ours that called this returns. */
	store_destroy(&s->core);
}

/* Validates one counter; returns NULL or why it is refused. */
static const char *pg_counter_check(const struct strategy_counter *c, bool diff)
{
	if (!c->ns || (!c->key && c->key_len))
		return "counter without namespace or key";
	if (c->ns_len > PG_NS_MAX)
		return "namespace longer than 256 bytes";
	if (memchr(c->ns, '\0', c->ns_len))
		return "namespace holds a NUL byte";
	if (c->key_len > PG_KEY_MAX)
		return "key longer than 2048 bytes";
	if (c->size == 0 || c->size > INT32_MAX)
		return "window size out of range";
	if (diff && (!isfinite(c->diff) || !isfinite(c->spent) || !isfinite(c->returned)))
		return "diff, spent or returned is not a finite number";
	return NULL;
}

/* Builds the sorted, merged plan of a push (read_only: every diff is 0).
 * Returns NULL or why it failed. */
static const char *pg_push_plan(struct pg *s, struct pg_op *op, bool read_only)
{
	size_t n = op->n;

	op->order = malloc((n ? n : 1) * sizeof(*op->order));
	op->groups = malloc((n ? n : 1) * sizeof(*op->groups));
	op->up = malloc((n ? n : 1) * sizeof(*op->up));
	op->rd = malloc((n ? n : 1) * sizeof(*op->rd));
	if (!op->order || !op->groups || !op->up || !op->rd)
		return "out of memory";
	for (size_t i = 0; i < n; i++) {
		const char *why = pg_counter_check(&op->batch[i], !read_only);

		if (why)
			return why;
		op->batch[i].ok = false;
		op->order[i] = &op->batch[i];
	}
	qsort(op->order, n, sizeof(*op->order), pg_cmp_counters_sort);
	for (size_t i = 0; i < n; i++) {
		const struct strategy_counter *c = op->order[i];
		struct pg_group *g = op->ngroups ? &op->groups[op->ngroups - 1] : NULL;

		if (g && !pg_cmp_counters(&g->c, &op->order[i])) {
			g->nmemb++;
			g->diff += read_only ? 0.0 : c->diff;
			g->spent += read_only ? 0.0 : c->spent;
			g->returned += read_only ? 0.0 : c->returned;
			continue;
		}
		if (!g || pg_cmp_bytes(g->c->ns, g->c->ns_len, c->ns, c->ns_len) ||
		    g->c->size != c->size)
			pg_seen_note(s, c->ns, c->ns_len, c->size);
		op->groups[op->ngroups++] = (struct pg_group){
			.c = c, .first = i, .nmemb = 1, .diff = read_only ? 0.0 : c->diff,
			.spent = read_only ? 0.0 : c->spent,
			.returned = read_only ? 0.0 : c->returned,
		};
	}
	for (size_t g = 0; g < op->ngroups; g++) {
		if (op->groups[g].diff != 0.0 || op->groups[g].spent != 0.0 ||
		    op->groups[g].returned != 0.0)
			op->up[op->nup++] = g;
		else
			op->rd[op->nrd++] = g;
	}
	if (pg_plan_chunks(op, true, op->up, op->nup) < 0 ||
	    pg_plan_chunks(op, false, op->rd, op->nrd) < 0)
		return "out of memory";
	return NULL;
}

static void pg_op_set_token(struct pg_op *op, const char *token, size_t len)
{
	if (!token)
		return;
	op->has_token = true;
	op->token_len = len;
	memcpy(op->token, token, len);
}

/* A token: NULL (none) or 1..STRATEGY_TOKEN_MAX bytes (len from strnlen). */
static int pg_check_token(const char *token, size_t len, char errstr[STRATEGY_ERR_MAX])
{
	if (token && (len == 0 || len > STRATEGY_TOKEN_MAX)) {
		pg_err_set(errstr, NULL, len ? "token longer than 64 bytes" : "empty token");
		return -1;
	}
	return 0;
}

static int pg_push_common(struct strategy *st, struct strategy_counter *batch, size_t n,
			  const char *token, bool read_only, strategy_done_cb cb, void *arg,
			  char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	struct pg_op *op;
	const char *why;
	size_t token_len = token ? strnlen(token, STRATEGY_TOKEN_MAX + 1) : 0;

	if (!s || !cb || (!batch && n)) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	if (pg_check_token(token, token_len, errstr) < 0)
		return -1;
	op = pg_op_new(s, read_only ? PG_OP_GET : PG_OP_PUSH);
	if (!op) {
		pg_err_set(errstr, NULL, "out of memory");
		return -1;
	}
	pg_op_set_token(op, token, token_len);
	op->batch = batch;
	op->n = n;
	op->done_cb = cb;
	op->arg = arg;
	why = pg_push_plan(s, op, read_only);
	if (why) {
		pg_err_set(errstr, NULL, why);
		pg_op_free(op);
		return -1;
	}
	return pg_submit(s, op, errstr);
}

static int pg_push_diffs(struct strategy *st, struct strategy_counter *batch, size_t n,
			 const char *token, strategy_done_cb cb, void *arg,
			 char errstr[STRATEGY_ERR_MAX])
{
	return pg_push_common(st, batch, n, token, false, cb, arg, errstr);
}

/* The token id of admission i: its fields hashed, plus how many identical
 * admissions follow it in the batch (stable when the caller resends the
 * admissions that were not decided, in order: see redis.c). */
static uint64_t pg_admit_id(const struct strategy_admit *a, size_t n, size_t i)
{
	uint64_t h = 1469598103934665603u, later = 0;
	const struct strategy_admit *x = &a[i];

	for (size_t j = i + 1; j < n; j++)
		later += a[j].ns_len == x->ns_len && !memcmp(a[j].ns, x->ns, x->ns_len) &&
			 a[j].key_len == x->key_len && !memcmp(a[j].key, x->key, x->key_len) &&
			 a[j].start == x->start && a[j].size == x->size && a[j].diff == x->diff &&
			 a[j].cost == x->cost && a[j].limit == x->limit &&
			 a[j].weight == x->weight && a[j].count_denied == x->count_denied;
	pg_hash_u64(&h, x->ns_len);
	pg_hash_bytes(&h, x->ns, x->ns_len);
	pg_hash_u64(&h, x->key_len);
	pg_hash_bytes(&h, x->key, x->key_len);
	pg_hash_u64(&h, (uint64_t)x->start);
	pg_hash_u64(&h, x->size);
	pg_hash_bytes(&h, &x->diff, sizeof(x->diff));
	pg_hash_bytes(&h, &x->cost, sizeof(x->cost));
	pg_hash_bytes(&h, &x->limit, sizeof(x->limit));
	pg_hash_bytes(&h, &x->weight, sizeof(x->weight));
	pg_hash_u64(&h, x->count_denied);
	pg_hash_u64(&h, later);
	return h;
}

static int pg_admit(struct strategy *st, struct strategy_admit *a, size_t n, const char *token,
		    strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	size_t token_len = token ? strnlen(token, STRATEGY_TOKEN_MAX + 1) : 0;
	struct pg_op *op;

	if (!s || !cb || (!a && n)) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	if (pg_check_token(token, token_len, errstr) < 0)
		return -1;
	if (store_admit_check(a, n, errstr) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		/* and what PostgreSQL itself cannot take */
		struct strategy_counter c = { .ns = a[i].ns, .ns_len = a[i].ns_len, .key = a[i].key,
					      .key_len = a[i].key_len, .size = a[i].size };
		const char *why = pg_counter_check(&c, false);

		if (why) {
			if (errstr)
				snprintf(errstr, STRATEGY_ERR_MAX, "admission %zu: %s", i, why);
			return -1;
		}
	}
	op = pg_op_new(s, PG_OP_ADMIT);
	if (!op || (token && n && !(op->adm_ids = malloc(n * sizeof(*op->adm_ids))))) {
		if (op)
			pg_op_free(op);
		pg_err_set(errstr, NULL, "out of memory");
		return -1;
	}
	pg_op_set_token(op, token, token_len);
	for (size_t i = 0; token && i < n; i++)
		op->adm_ids[i] = pg_admit_id(a, n, i);
	op->admits = a;
	op->n = n;
	op->done_cb = cb;
	op->arg = arg;
	for (size_t i = 0; i < n; i++)
		pg_seen_note(s, a[i].ns, a[i].ns_len, a[i].size);
	return pg_submit(s, op, errstr);
}

static int pg_heartbeat(struct strategy *st, const char *ns, size_t ns_len, const char *node,
			size_t node_len, double now, double ttl, unsigned *active,
			strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	struct pg_op *op;

	if (!s || !cb || !active || !ns || node_len == 0 || node_len > sizeof(op->node) ||
	    ns_len > PG_NS_MAX || memchr(ns, '\0', ns_len) || !isfinite(now) || !(ttl > 0)) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	op = pg_op_new(s, PG_OP_NODES);
	if (!op || !(op->ns = malloc(ns_len ? ns_len : 1))) {
		if (op)
			pg_op_free(op);
		pg_err_set(errstr, NULL, "out of memory");
		return -1;
	}
	memcpy(op->ns, ns, ns_len);
	op->ns_len = ns_len;
	memcpy(op->node, node, node_len);
	op->node_len = node_len;
	op->ttl = ttl;
	op->active = active;
	op->done_cb = cb;
	op->arg = arg;
	return pg_submit(s, op, errstr);
}

static int pg_get_window(struct strategy *st, struct strategy_counter *counter,
			 strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	if (!counter) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	return pg_push_common(st, counter, 1, NULL, true, cb, arg, errstr);
}

/* FETCH and PURGE: copies ns, dedups sizes, computes the starts (FETCH:
 * current and previous window of each size; PURGE: the newest start to
 * delete, now - 2 * size). */
static const char *pg_windows_plan(struct pg *s, struct pg_op *op, const char *ns, size_t ns_len,
				   const uint32_t *sizes, size_t nsizes, int64_t now)
{
	if (!ns || (!sizes && nsizes))
		return "invalid arguments";
	if (now < -PG_TIME_MAX || now > PG_TIME_MAX)
		return "time out of range";
	if (ns_len > PG_NS_MAX)
		return "namespace longer than 256 bytes";
	if (memchr(ns, '\0', ns_len))
		return "namespace holds a NUL byte";
	op->ns = malloc(ns_len ? ns_len : 1);
	op->sizes = malloc((nsizes ? nsizes : 1) * 2 * sizeof(*op->sizes));
	op->starts = malloc((nsizes ? nsizes : 1) * 2 * sizeof(*op->starts));
	if (!op->ns || !op->sizes || !op->starts)
		return "out of memory";
	if (ns_len)
		memcpy(op->ns, ns, ns_len);
	op->ns_len = ns_len;
	for (size_t i = 0; i < nsizes; i++) {
		uint32_t z = sizes[i];
		bool dup = false;

		if (z == 0 || z > INT32_MAX)
			return "window size out of range";
		for (size_t k = 0; k < i; k++)
			dup = dup || sizes[k] == z;
		if (dup)
			continue;
		pg_seen_note(s, ns, ns_len, z);
		if (op->kind == PG_OP_FETCH) {
			int64_t cur = strategy_window_start((double)now, z);

			op->sizes[op->nw] = (int32_t)z;
			op->starts[op->nw++] = cur;
			op->sizes[op->nw] = (int32_t)z;
			op->starts[op->nw++] = cur - z;
		} else {
			op->sizes[op->nw] = (int32_t)z;
			op->starts[op->nw++] = now - 2 * (int64_t)z;
		}
	}
	return NULL;
}

static int pg_windows_common(struct strategy *st, enum pg_op_kind kind, const char *ns,
			     size_t ns_len, const uint32_t *sizes, size_t nsizes, int64_t now,
			     strategy_done_cb done, strategy_rows_cb rows, void *arg,
			     char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	struct pg_op *op;
	const char *why;

	if (!s || (!done && !rows)) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	op = pg_op_new(s, kind);
	if (!op) {
		pg_err_set(errstr, NULL, "out of memory");
		return -1;
	}
	op->done_cb = done;
	op->rows_cb = rows;
	op->arg = arg;
	why = pg_windows_plan(s, op, ns, ns_len, sizes, nsizes, now);
	if (why) {
		pg_err_set(errstr, NULL, why);
		pg_op_free(op);
		return -1;
	}
	return pg_submit(s, op, errstr);
}

static int pg_get_counters(struct strategy *st, const char *ns, size_t ns_len,
			   const uint32_t *sizes, size_t nsizes, int64_t now, strategy_rows_cb cb,
			   void *arg, char errstr[STRATEGY_ERR_MAX])
{
	return pg_windows_common(st, PG_OP_FETCH, ns, ns_len, sizes, nsizes, now, NULL, cb, arg,
				 errstr);
}

static int pg_purge(struct strategy *st, const char *ns, size_t ns_len, const uint32_t *sizes,
		    size_t nsizes, int64_t now, strategy_done_cb cb, void *arg,
		    char errstr[STRATEGY_ERR_MAX])
{
	return pg_windows_common(st, PG_OP_PURGE, ns, ns_len, sizes, nsizes, now, cb, NULL, arg,
				 errstr);
}

static bool pg_ready(const struct strategy *st)
{
	const struct pg *s = (const struct pg *)(const void *)st;

	return s && !s->core.destroyed && pg_any_ready(s);
}

static bool pg_connecting(const struct strategy *st)
{
	const struct pg *s = (const struct pg *)(const void *)st;

	return s && !s->core.destroyed && !pg_any_ready(s) && !pg_all_down(s);
}

const struct strategy_ops postgres_strategy = {
	.name = "postgres",
	.check_opts = pg_check_opts,
	.admit = pg_admit,
	.heartbeat = pg_heartbeat,
	.create = pg_create,
	.destroy = pg_destroy,
	.push_diffs = pg_push_diffs,
	.get_counters = pg_get_counters,
	.get_window = pg_get_window,
	.purge = pg_purge,
	.ready = pg_ready,
	.connecting = pg_connecting,
};
