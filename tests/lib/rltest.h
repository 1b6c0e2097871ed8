/*
 * rltest.h - a library instance (agent/ratelimit.h) for unit tests, from
 * a configuration given as JSON text: the configuration loaded as the
 * agent loads its file, the instance made with every namespace. Fails the
 * test on any error.
 */
#ifndef RLTEST_H
#define RLTEST_H

#include "agent/config.h"
#include "agent/ratelimit.h"

/* Loads json into *cfg (config_defaults first) and returns an instance
 * named name with cfg's max_keys and namespaces. The caller frees both
 * (rl_free, config_free). */
struct rl *rltest_new(const char *name, const char *json, struct config *cfg);

/* Fails the test unless a configuration of the one namespace ns_json
 * (an object's text) is refused, its JSON path holding field and its
 * message what. */
void rltest_ns_refused(const char *ns_json, const char *field, const char *what);

/* procs processes, each hits times at once at now, hit key of namespace
 * ns (window 1, cost 1) with the limit, counting denied: the hits counted
 * between them. */
int rltest_race(struct rl *rl, int ns, const char *key, int procs, int hits, double now,
		double limit);

#endif /* RLTEST_H */
