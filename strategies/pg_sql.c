/*
 * pg_sql.c - the SQL text of the PostgreSQL strategy (strategies/pg_int.h):
 * the prepared statements, the set-up, and the templates' names filled in.
 * Only the validated table name (and the names derived from it) ever
 * enters SQL text; every value travels as a bound parameter (pg_value.c).
 *
 *   CREATE TABLE IF NOT EXISTS "<table>" (
 *       namespace    text             NOT NULL,
 *       key          bytea            NOT NULL,   -- keys are bytes
 *       window_start bigint           NOT NULL,   -- Unix seconds
 *       window_size  integer          NOT NULL,   -- seconds
 *       count        double precision NOT NULL,
 *       reserved     double precision NOT NULL DEFAULT 0, -- grants (admit)
 *       reset        boolean NOT NULL DEFAULT false,   -- forgotten (forget)
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
 * by an administrator; a table of an earlier version gets the columns it
 * lacks (reserved, reset) with ALTER TABLE ... ADD COLUMN IF NOT EXISTS,
 * which its owner may run instead.
 *
 * reset: the row's key was forgotten in its window (rl_forget, an
 * operator's DELETE /keys), which made the row if there was none. Later
 * upserts keep it; pushes and reads return it (strategy_counter.reset),
 * so that every node writes that count into its table even when it is
 * lower than the node's (docs/CLUSTER.md, "Forgetting a key").
 *
 * Every sync cycle rewrites every row it pushes. With pages only half
 * filled by inserts, the new version of a row fits in its own page (a HOT
 * update: no index entry to add, the old version pruned in place); with
 * full pages every update would insert into both indexes. Measured here:
 * 10k-row upserts about 1.6 times faster at fillfactor 50 than at 100.
 */
#include <stdlib.h>
#include <string.h>

#include "strategies/pg_int.h"

#define PG_GUC_FRESH         "spoa_ratelimit.token_fresh" /* transaction-local */
#define PG_STR_(x)           #x
#define PG_STR(x)            PG_STR_(x)

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

/* What rl_gcra and rl_gcra_tok share: the row locked (o), the server's
 * time and T (n), whether the hit fits (tau = burst x T, with the slack of
 * agent/algo_gcra.c), the TAT written and returned (b: the row's own when
 * the token was applied before; lowered only by a negative diff, hits
 * given back). */
#define PG_GCRA_ROWS \
	"o AS (SELECT count FROM @T@ WHERE namespace = $1 AND window_size = $4" \
	" AND window_start = $3 AND key = $2 FOR UPDATE)," \
	" n AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now, $4 / $7 AS tt),"
#define PG_GCRA_FITS \
	"x0.b + $6 * x0.tt - x0.now <= $8 * x0.tt + least(1e-6, 1e-3 * x0.tt)"
#define PG_GCRA_UPDATE \
	" UPDATE @T@ AS t SET count = CASE WHEN d.fresh AND d.adm THEN d.b + $6 * d.tt" \
	" ELSE d.b END FROM d WHERE t.namespace = $1" \
	" AND t.window_size = $4 AND t.window_start = $3 AND t.key = $2" \
	" RETURNING greatest(t.count - d.now, 0), 0::float8, d.adm, 0::float8"

/* What rl_upsert and rl_upsert_tok share: a row met adds its count and
 * reservation (never below 0), and every row comes back with its reset
 * mark; their parameters' types. */
#define PG_SQL_UPSERT_TAIL \
	" ON CONFLICT (namespace, window_size, window_start, key)" \
	" DO UPDATE SET count = t.count + EXCLUDED.count," \
	" reserved = CASE WHEN EXCLUDED.reserved = 0 THEN t.reserved" \
	" ELSE greatest(t.reserved + EXCLUDED.reserved, 0) END" \
	" RETURNING t.namespace, t.key, t.window_start, t.window_size, t.count, t.reset"
#define PG_UPSERT_TYPES \
	{ PG_OID_TEXT_ARRAY, PG_OID_BYTEA_ARRAY, PG_OID_INT8_ARRAY, PG_OID_INT4_ARRAY, \
	  PG_OID_FLOAT8_ARRAY, PG_OID_FLOAT8_ARRAY }

const struct pg_stmt_def pg_stmts[PG_STMT_COUNT] = {
	/* $1..$6: namespaces, keys, starts, sizes, what to add to the counts
	 * (diff + grants spent), what to add to the reservations (- grants
	 * spent and returned, never going below 0; a new row takes it as it
	 * is: decisions read a negative one as 0); all the same length.
	 * Returns the new count of every row, and its reset mark. */
	[PG_STMT_UPSERT] = {
		"rl_upsert",
		"INSERT INTO @T@ AS t (namespace, key, window_start, window_size, count, reserved)"
		" SELECT * FROM unnest($1::text[], $2::bytea[], $3::int8[], $4::int4[],"
		" $5::float8[], $6::float8[])"
		PG_SQL_UPSERT_TAIL,
		6,
		PG_UPSERT_TYPES,
	},
	/* The same identities, read only; absent rows are not returned. */
	[PG_STMT_READ] = {
		"rl_read",
		"SELECT t.namespace, t.key, t.window_start, t.window_size, t.count, t.reset"
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
	/* Windows up to their cutoff, and the expired leases of a
	 * concurrency limit's window (rl_lease: window_size minus the
	 * window's, window_start 0, count their expiry), which no key's step
	 * deletes once nobody takes a lease of that key again. */
	[PG_STMT_PURGE] = {
		"rl_purge",
		"DELETE FROM @T@ AS t"
		" USING unnest($2::int4[], $3::int8[]) AS p(window_size, cutoff)"
		" WHERE t.namespace = $1 AND (t.window_size = p.window_size"
		" AND t.window_start <= p.cutoff"
		/* GCRA's TAT rows (window_start -1, rl_gcra): once the TAT
		 * fell behind the server's clock (it says nothing then) */
		" AND (t.window_start <> -1 OR t.count < extract(epoch FROM clock_timestamp()))"
		/* lease rows (window_size -size, window_start 0, rl_lease):
		 * once expired */
		" OR t.window_size = -p.window_size"
		" AND t.window_start = 0 AND t.count <= extract(epoch FROM clock_timestamp()))",
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
		PG_SQL_UPSERT_TAIL,
		6,
		PG_UPSERT_TYPES,
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
	/* GCRA's TAT step (struct strategy_admit, STRATEGY_STEP_TAT), after
	 * rl_admit_row: the key's row at window_start -1 holds its TAT in
	 * count, Unix seconds of the server's clock (clock_timestamp(): the
	 * nodes' clocks are never compared). $1..$11 as rl_admit's but $8:
	 * the burst ($9..$11 unused); n.tt is T (size / limit). Returns the
	 * TAT minus now (>= 0), 0, admitted, 0: rl_admit's shape. */
	[PG_STMT_GCRA] = {
		"rl_gcra",
		"WITH " PG_GCRA_ROWS
		" x0 AS (SELECT n.now, n.tt, greatest(o.count, n.now) + $5 * n.tt AS b FROM o, n),"
		" d AS (SELECT x0.now, x0.tt, x0.b, true AS fresh, " PG_GCRA_FITS " AS adm FROM x0)"
		PG_GCRA_UPDATE,
		11,
		PG_ADMIT_TYPES,
	},
	/* With a token ($12, rl_token before it): as rl_gcra if it was new,
	 * an admitted step recorded as the token + ":a"; if not, the TAT is
	 * not moved and the recorded decision comes back. */
	[PG_STMT_GCRA_TOK] = {
		"rl_gcra_tok",
		"WITH f AS (SELECT current_setting('" PG_GUC_FRESH "') = 'y' AS fresh), "
		PG_GCRA_ROWS
		" r AS (SELECT FROM @K@ WHERE token = $12 || '\\x3a61'::bytea),"
		" x0 AS (SELECT n.now, n.tt, f.fresh, CASE WHEN f.fresh THEN"
		" greatest(o.count, n.now) + $5 * n.tt ELSE o.count END AS b FROM o, n, f),"
		" d AS (SELECT x0.now, x0.tt, x0.b, x0.fresh, CASE WHEN x0.fresh THEN " PG_GCRA_FITS
		" ELSE EXISTS (SELECT FROM r) END AS adm FROM x0),"
		" k AS (INSERT INTO @K@ (token) SELECT $12 || '\\x3a61'::bytea FROM d"
		" WHERE d.fresh AND d.adm ON CONFLICT DO NOTHING)"
		PG_GCRA_UPDATE,
		12,
		PG_ADMIT_TYPES,
	},
	/* A concurrency limit's step (struct strategy_admit,
	 * STRATEGY_STEP_LEASE), part 1: the key's row at window_start -1
	 * (count unused) made or locked (DO UPDATE locks a row that exists),
	 * so that the statement after it, with a snapshot of its own, sees
	 * every lease of the key another transaction added before. */
	[PG_STMT_LEASE_ROW] = {
		"rl_lease_row",
		"INSERT INTO @T@ AS t (namespace, key, window_start, window_size, count)"
		" VALUES ($1, $2, $3, $4, 0)"
		" ON CONFLICT (namespace, window_size, window_start, key)"
		" DO UPDATE SET count = t.count",
		4,
		{ PG_OID_TEXT, PG_OID_BYTEA, PG_OID_INT8, PG_OID_INT4 },
	},
	/* Part 2, the key's row locked: the key's leases are rows of their
	 * own, window_size -$4 (no purge names a negative size), window_start
	 * 0, key = int4send(length($2)) || $2 || the lease id (n.p: a prefix
	 * no other key has), count = when it expires, Unix seconds of the
	 * server's clock. $1..$11 as rl_admit's but $5: the lease's life (s),
	 * $12: its id (empty: a release of the first to expire). Expired
	 * leases go; an acquire ($6 > 0) is admitted when its lease is in
	 * flight already (a resend) or the others number under $7, and
	 * added; a release removes its lease. Returns the leases in flight
	 * after, the seconds until the first expires, admitted, 0: rl_admit's
	 * shape. */
	[PG_STMT_LEASE] = {
		"rl_lease",
		"WITH n AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now,"
		" int4send(length($2)) || $2 AS p),"
		" l AS (SELECT t.key, t.count FROM @T@ t, n WHERE t.namespace = $1"
		" AND t.window_size = -$4 AND t.window_start = 0 AND t.key > n.p"
		" AND t.key < n.p || '\\xff'::bytea AND t.count > n.now),"
		" s AS (SELECT n.now, n.p, n.p || $12 AS me, CASE WHEN $6 > 0 OR length($12) > 0"
		" THEN n.p || $12 ELSE (SELECT l.key FROM l ORDER BY l.count LIMIT 1) END AS gone,"
		" (SELECT count(*) FROM l) AS live FROM n),"
		" d AS (SELECT s.*, EXISTS (SELECT FROM l WHERE l.key = s.me) AS mine,"
		" CASE WHEN $6 > 0 THEN EXISTS (SELECT FROM l WHERE l.key = s.me) OR s.live < $7"
		" ELSE EXISTS (SELECT FROM l WHERE l.key = s.gone) END AS adm FROM s),"
		" x AS (DELETE FROM @T@ t USING d WHERE t.namespace = $1 AND t.window_size = -$4"
		" AND t.window_start = 0 AND t.key > d.p AND t.key < d.p || '\\xff'::bytea"
		" AND NOT ($6 > 0 AND t.key = d.me) AND (t.count <= d.now OR ($6 = 0 AND t.key = d.gone))),"
		" i AS (INSERT INTO @T@ (namespace, key, window_start, window_size, count)"
		" SELECT $1, d.me, 0, -$4, d.now + $5 FROM d WHERE $6 > 0 AND d.adm AND NOT d.mine"
		" ON CONFLICT (namespace, window_size, window_start, key)"
		" DO UPDATE SET count = excluded.count)"
		" SELECT (d.live + CASE WHEN NOT d.adm THEN 0 WHEN $6 = 0 THEN -1"
		" WHEN d.mine THEN 0 ELSE 1 END)::float8,"
		" coalesce((SELECT min(l.count) FROM l WHERE $6 > 0 OR l.key <> d.gone) - d.now,"
		" CASE WHEN $6 > 0 AND d.adm THEN $5 ELSE 0 END),"
		" d.adm, 0::float8 FROM d",
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
	/* forget (after rl_token with the call's token, in its transaction):
	 * $1 namespace, $2 key, $3/$4 the (size, start) pairs of its windows
	 * (current and previous of each size), $5 the token. If the token was
	 * new, every window's row of the key (made if missing) gets count 0,
	 * reserved 0 and reset true, and the hits it held (summed) are
	 * recorded as the token + ":f" + their number in text, and returned;
	 * if not, nothing is changed and the recorded number comes back. o
	 * reads the rows as the statement began (the upsert's own snapshot):
	 * a push that commits meanwhile is forgotten too, and not in the
	 * number. */
	[PG_STMT_FORGET] = {
		"rl_forget",
		"WITH f AS (SELECT current_setting('" PG_GUC_FRESH "') = 'y' AS fresh),"
		" w AS (SELECT * FROM unnest($3::int4[], $4::int8[]) AS w(window_size, window_start)),"
		" o AS (SELECT coalesce(sum(t.count), 0)::float8 AS n FROM @T@ AS t JOIN w"
		" ON t.window_size = w.window_size AND t.window_start = w.window_start"
		" WHERE t.namespace = $1 AND t.key = $2),"
		" r AS (SELECT substring(token from length($5) + 3) AS g FROM @K@"
		" WHERE token >= $5 || '\\x3a66'::bytea AND token < $5 || '\\x3a67'::bytea"
		" LIMIT 1),"
		" up AS (INSERT INTO @T@ AS t"
		" (namespace, key, window_start, window_size, count, reserved, reset)"
		" SELECT $1, $2, w.window_start, w.window_size, 0, 0, true FROM w, f WHERE f.fresh"
		" ON CONFLICT (namespace, window_size, window_start, key)"
		" DO UPDATE SET count = 0, reserved = 0, reset = true),"
		" k AS (INSERT INTO @K@ (token) SELECT $5 || '\\x3a66'::bytea"
		" || convert_to(o.n::text, 'UTF8') FROM o, f WHERE f.fresh ON CONFLICT DO NOTHING)"
		" SELECT CASE WHEN f.fresh THEN o.n ELSE coalesce((SELECT"
		" NULLIF(convert_from(r.g, 'UTF8'), '')::float8 FROM r), 0) END FROM f, o",
		5,
		{ PG_OID_TEXT, PG_OID_BYTEA, PG_OID_INT4_ARRAY, PG_OID_INT8_ARRAY, PG_OID_BYTEA },
	},
	/* Limits per key set at run time (strategy.h, limit_set): rows of
	 * the window table under the namespace "<ns>\x01limits" (no
	 * configured namespace has a control character: never counted,
	 * fetched or purged as windows), window_start 0, count = the limit;
	 * the row of window_size 0 and the empty key holds the version. $1
	 * that namespace, $2 key, $3 size, $4 the limit (< 0: remove), $5 the
	 * most it may hold. Returns the new version, or no row (full). */
	[PG_STMT_LIMIT_SET] = {
		"rl_limit_set",
		"WITH o AS (SELECT count(*) AS n FROM @T@ WHERE namespace = $1"
		" AND window_size <> 0 AND window_start = 0),"
		" e AS (SELECT EXISTS (SELECT FROM @T@ WHERE namespace = $1 AND window_size = $3"
		" AND window_start = 0 AND key = $2) AS have),"
		" ok AS (SELECT $4 < 0 OR e.have OR o.n < $5 AS go FROM o, e),"
		" del AS (DELETE FROM @T@ AS t USING ok WHERE ok.go AND $4 < 0"
		" AND t.namespace = $1 AND t.window_size = $3 AND t.window_start = 0"
		" AND t.key = $2),"
		" ins AS (INSERT INTO @T@ AS t (namespace, key, window_start, window_size, count)"
		" SELECT $1, $2, 0, $3, $4 FROM ok WHERE ok.go AND $4 >= 0"
		" ON CONFLICT (namespace, window_size, window_start, key)"
		" DO UPDATE SET count = EXCLUDED.count)"
		" INSERT INTO @T@ AS t (namespace, key, window_start, window_size, count)"
		" SELECT $1, '\\x'::bytea, 0, 0, 1 FROM ok WHERE ok.go"
		" ON CONFLICT (namespace, window_size, window_start, key)"
		" DO UPDATE SET count = t.count + 1 RETURNING t.count",
		5,
		{ PG_OID_TEXT, PG_OID_BYTEA, PG_OID_INT4, PG_OID_FLOAT8, PG_OID_INT8 },
	},
	/* $1 the overrides' namespace, $2 the version the node has: the
	 * version's row (if any) and, when it differs, every override; one
	 * snapshot. */
	[PG_STMT_LIMITS_READ] = {
		"rl_limits_read",
		"SELECT t.key, t.window_start, t.window_size, t.count FROM @T@ AS t"
		" WHERE t.namespace = $1 AND t.window_start = 0 AND (t.window_size = 0"
		" OR coalesce((SELECT v.count FROM @T@ AS v WHERE v.namespace = $1"
		" AND v.window_size = 0 AND v.window_start = 0 AND v.key = '\\x'::bytea), 0) <> $2)",
		2,
		{ PG_OID_TEXT, PG_OID_FLOAT8 },
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
const char pg_sql_probe[] =
	"SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND"
	" (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1)"
	" AND attname IN ('reserved', 'reset') AND NOT attisdropped) = 2";
const char pg_sql_lock[] = "SELECT pg_advisory_xact_lock(29292, hashtext($1))"; /* "rl" */
const char pg_tpl_table[] =
	"CREATE TABLE IF NOT EXISTS @T@ (namespace text NOT NULL, key bytea NOT NULL,"
	" window_start bigint NOT NULL, window_size integer NOT NULL,"
	" count double precision NOT NULL, reserved double precision NOT NULL DEFAULT 0,"
	" reset boolean NOT NULL DEFAULT false,"
	" PRIMARY KEY (namespace, window_size, window_start, key)) WITH (fillfactor = 50)";
/* A table of an earlier version: the reservations' column (no rewrite:
 * a constant default). */
const char pg_tpl_reserved[] =
	"ALTER TABLE @T@ ADD COLUMN IF NOT EXISTS reserved double precision NOT NULL DEFAULT 0";
/* ... and the forgotten windows' mark (the same). */
const char pg_tpl_reset[] =
	"ALTER TABLE @T@ ADD COLUMN IF NOT EXISTS reset boolean NOT NULL DEFAULT false";
const char pg_tpl_index[] =
	"CREATE INDEX IF NOT EXISTS @I@ ON @T@ (namespace, window_start)";
const char pg_tpl_tokens[] =
	"CREATE TABLE IF NOT EXISTS @K@ (token bytea PRIMARY KEY,"
	" at timestamptz NOT NULL DEFAULT now())";
const char pg_tpl_tokens_index[] =
	"CREATE INDEX IF NOT EXISTS @J@ ON @K@ (at)";

/* Replaces every "@T@" with the table, "@I@" with its index, "@K@" with the
 * tokens table and "@J@" with its index (names[0..3], quoted). Returns a
 * malloc'd string or NULL. */
char *pg_sql_fill(const char *tpl, const char *const names[4])
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
