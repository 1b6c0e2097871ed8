/*
 * fronts.c - the registry of the fronts: their ops tables by id, from the
 * list in agent/fronts.h (the one place a front is added).
 */
#include "agent/stream.h"

const struct front_ops *const fronts[FRONT_COUNT] = {
#define FRONT_OPS_ENTRY(id, name, ops, field, key) [FRONT_##id] = &ops,
	FRONTS(FRONT_OPS_ENTRY)
#undef FRONT_OPS_ENTRY
};
