/* stub */
#include "agent/stream.h"
#include "agent/config.h"
#include <stdlib.h>
static struct stream *peers_open(struct front_env *env, int fd) { (void)env; (void)fd; return NULL; }
static double peers_idle_since(const struct stream *s) { (void)s; return -1; }
static void peers_nop(struct stream *s) { (void)s; }
const struct front_ops peers_front = {
	.id = FRONT_PEERS,
	.open = peers_open,
	.idle_since = peers_idle_since,
	.drain = peers_nop,
	.evict = peers_nop,
	.close = peers_nop,
	.free = stream_free,
};
