/*
 * fronts.h - the list of the agent's fronts: what a listener speaks
 * (agent/stream.h). One line each: X(ID, name, ops table, address key):
 * the key is both the configuration's key of its listen address and the
 * field of struct config that holds it (agent/config.h). The
 * configuration (its keys, checks, the reload's "kept" warning), the
 * start-up line, the metrics, the shared balance, the master's listeners
 * and the worker (each front's own state: front_env.state) iterate over
 * this list; adding a front is its file (a struct front_ops) and one line
 * here.
 */
#ifndef FRONTS_H
#define FRONTS_H

#define FRONTS(X)                                                                        \
	/* HAProxy's SPOE (agent/spop_front.c) */                                        \
	X(SPOP, "spop", spop_front, listen, "listen")                                    \
	/* nginx's auth_request, callers (agent/http_front.c) */                         \
	X(HTTP, "http", http_front, http_listen, "http_listen")                          \
	/* HAProxy's peers: the nodes' stick tables summed (agent/peers_front.c) */     \
	X(PEERS, "peers", peers_front, peers_listen, "peers.listen")

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
