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

#endif /* RLTEST_H */
