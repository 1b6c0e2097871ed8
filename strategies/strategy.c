/*
 * strategy.c - the table of stores, and the `local` strategy: no central
 * store at all (sync_rate < 0). Its operations are refused at once, so a
 * caller that syncs a local namespace by mistake gets an error, not a
 * silent no-op.
 */
#include "strategies/strategy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct strategy {
	struct ev_loop *loop;
};

static int local_check_opts(const char *opts_json, char *err, size_t errlen)
{
	if (opts_json && strcmp(opts_json, "{}") != 0) {
		snprintf(err, errlen, "the local strategy takes no strategy_opts");
		return -1;
	}
	return 0;
}

static struct strategy *local_create(struct ev_loop *loop, const char *opts_json, char *err,
				     size_t errlen)
{
	if (local_check_opts(opts_json, err, errlen) < 0)
		return NULL;
	struct strategy *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->loop = loop;
	return s;
}

static void local_destroy(struct strategy *s)
{
	free(s);
}

static int local_refuse(char errstr[STRATEGY_ERR_MAX])
{
	snprintf(errstr, STRATEGY_ERR_MAX, "the local strategy keeps no central store");
	return -1;
}

static int local_push_diffs(struct strategy *s, struct strategy_counter *batch, size_t n,
			    const char *token, strategy_done_cb cb, void *arg,
			    char errstr[STRATEGY_ERR_MAX])
{
	(void)s, (void)batch, (void)n, (void)token, (void)cb, (void)arg;
	return local_refuse(errstr);
}

static int local_get_counters(struct strategy *s, const char *ns, size_t ns_len,
			      const uint32_t *sizes, size_t nsizes, int64_t now,
			      strategy_rows_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	(void)s, (void)ns, (void)ns_len, (void)sizes, (void)nsizes, (void)now, (void)cb, (void)arg;
	return local_refuse(errstr);
}

static int local_get_window(struct strategy *s, struct strategy_counter *counter,
			    strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	(void)s, (void)counter, (void)cb, (void)arg;
	return local_refuse(errstr);
}

static int local_purge(struct strategy *s, const char *ns, size_t ns_len, const uint32_t *sizes,
		       size_t nsizes, int64_t now, strategy_done_cb cb, void *arg,
		       char errstr[STRATEGY_ERR_MAX])
{
	(void)s, (void)ns, (void)ns_len, (void)sizes, (void)nsizes, (void)now, (void)cb, (void)arg;
	return local_refuse(errstr);
}

static bool local_ready(const struct strategy *s)
{
	(void)s;
	return false;
}

const struct strategy_ops local_strategy = {
	.name = "local",
	.check_opts = local_check_opts,
	.create = local_create,
	.destroy = local_destroy,
	.push_diffs = local_push_diffs,
	.get_counters = local_get_counters,
	.get_window = local_get_window,
	.purge = local_purge,
	.ready = local_ready,
	.connecting = local_ready,
};

static const struct strategy_ops *const strategies[] = {
	&local_strategy,
	&redis_strategy,
	&postgres_strategy,
};

const struct strategy_ops *strategy_find(const char *name)
{
	for (size_t i = 0; i < sizeof(strategies) / sizeof(strategies[0]); i++)
		if (strcmp(strategies[i]->name, name) == 0)
			return strategies[i];
	return NULL;
}

const char *strategy_name(size_t i)
{
	return i < sizeof(strategies) / sizeof(strategies[0]) ? strategies[i]->name : NULL;
}
