/*
 * algo.c - the table of algorithms (agent/algo.h), one entry per enum
 * ns_algorithm, each the ops table of its file agent/algo_<name>.c.
 */
#include "agent/algo.h"

const struct algo_ops *const algo_table[NS_ALGO_COUNT] = {
	[NS_ALGO_WINDOW] = &algo_window,
	[NS_ALGO_GCRA] = &algo_gcra,
};
