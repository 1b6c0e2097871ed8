/*
 * fronts.h - the list of the agent's fronts: what a listener speaks
 * (agent/stream.h). One line each: X(ID, name, ops table, field, address
 * key): the field of struct config that holds its listen address
 * (agent/config.h), read at its key, a JSON path. The
 * configuration (its keys, checks, the reload's "kept" warning), the
 * start-up line, the metrics, the shared balance, the master's listeners
 * and the worker (each front's own state: front_env.state) iterate over
 * this list; adding a front is its file (a struct front_ops) and one line
 * here (and its key's row in docs/CONFIG.md and docs/spoa-ratelimit.8).
 */
#ifndef FRONTS_H
#define FRONTS_H

/* One line per front, its comment saying whom it serves and its file; the
 * line after the last ends the list, so that a front is added by one line. */
#define FRONTS(X)                                                                        \
	X(SPOP, "spop", spop_front, listen, "listen")           /* HAProxy: spop_front.c */ \
	X(HTTP, "http", http_front, http_listen, "http_listen") /* nginx: http_front.c */   \
	X(PEERS, "peers", peers_front, peers_listen, "peers.listen") /* peers_front.c */    \
	X(GRPC, "grpc", grpc_front, grpc_listen, "grpc_listen") /* Envoy: grpc_front.c */  \
	/* (the end of the list) */

/* A front's number: its metrics' label and its listener's place. */
enum front_id {
#define FRONT_ID(id, name, ops, field, key) FRONT_##id,
	FRONTS(FRONT_ID)
#undef FRONT_ID
	FRONT_COUNT
};

static inline const char *front_name(enum front_id f)
{
	static const char *const names[FRONT_COUNT] = {
#define FRONT_NAME(id, name, ops, field, key) [FRONT_##id] = name,
		FRONTS(FRONT_NAME)
#undef FRONT_NAME
	};

	return (unsigned)f < FRONT_COUNT ? names[f] : "?";
}

/* The configuration key of a front's listen address, its JSON path
 * ("listen", "peers.listen"). */
static inline const char *front_address_key(enum front_id f)
{
	static const char *const keys[FRONT_COUNT] = {
#define FRONT_KEY(id, name, ops, field, key) [FRONT_##id] = key,
		FRONTS(FRONT_KEY)
#undef FRONT_KEY
	};

	return (unsigned)f < FRONT_COUNT ? keys[f] : "?";
}

#endif /* FRONTS_H */
