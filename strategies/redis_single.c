/*
 * redis_single.c - one Redis server (host/port, or a unix socket) for the
 * Redis strategy (strategies/redis_int.h): one data connection (redis_conn.c),
 * every call routed to it, ready when it is.
 */
#include <stdio.h>

#include "strategies/redis_int.h"

static int redis_single_start(struct redis_strategy *s, char *err, size_t errlen)
{
	s->main = redis_conn_new(s, REDIS_CONN_DATA, &s->o.addr);
	if (s->main == NULL) {
		snprintf(err, errlen, "redis: out of memory");
		return -1;
	}
	redis_conn_open(s->main);
	return 0;
}

static bool redis_single_connecting(const struct redis_strategy *s)
{
	return s->main && s->main->state == REDIS_ST_CONNECTING;
}

static const char *redis_single_why_down(const struct redis_strategy *s)
{
	return s->main ? s->main->last_err : "";
}

const struct redis_mode_ops redis_single_mode = {
	.name = "single",
	.start = redis_single_start,
	.route = redis_route_main,
	.ready = redis_main_ready,
	.connecting = redis_single_connecting,
	.why_down = redis_single_why_down,
};
