/*
 * fronts.h - the list of the agent's fronts: what a listener speaks
 * (agent/stream.h). One line each: X(ID, name, ops table). The metrics,
 * the shared balance, the master's listeners and the worker iterate over
 * this list; adding a front is its file (a struct front_ops) and one line
 * here.
 */
#ifndef FRONTS_H
#define FRONTS_H

#define FRONTS(X)                                                                        \
	X(SPOP, "spop", spop_front)   /* HAProxy's SPOE (agent/spop_front.c) */           \
	X(HTTP, "http", http_front)   /* nginx's auth_request, callers (agent/http_front.c) */

/* A front's number: its metrics' label and its listener's place. */
enum front_id {
#define FRONT_ID(id, name, ops) FRONT_##id,
	FRONTS(FRONT_ID)
#undef FRONT_ID
	FRONT_COUNT
};

static inline const char *front_name(enum front_id f)
{
	static const char *const names[FRONT_COUNT] = {
#define FRONT_NAME(id, name, ops) [FRONT_##id] = name,
		FRONTS(FRONT_NAME)
#undef FRONT_NAME
	};

	return (unsigned)f < FRONT_COUNT ? names[f] : "?";
}

#endif /* FRONTS_H */
