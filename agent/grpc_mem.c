/*
 * grpc_mem.c - the gRPC front's heap, counted per connection (see
 * agent/grpc_int.h): nghttp2's allocations (its nghttp2_mem) and the calls'
 * larger messages. Each block carries its size before it, so that a
 * connection's bytes are known to the byte: at most GRPC_CONN_MEM, and all
 * of them counted in the worker's max_buffer_memory with the stream
 * buffers (front_env.buf_bytes, front_bytes[FRONT_GRPC]). A refusal is a
 * NULL: nghttp2 then fails the session (NGHTTP2_ERR_NOMEM) and the
 * connection closes, a call answers RESOURCE_EXHAUSTED; nobody else waits.
 */
#include "agent/grpc_int.h"
#include "agent/config.h"

#include <stdalign.h>
#include <stdlib.h>

/* The head of a block: its size with the head, aligned for anything. */
union grpc_mem_head {
	size_t size;
	max_align_t align;
};

/* May c take more bytes? Counts them if so. */
static bool grpc_mem_take(struct grpc_conn *c, size_t more)
{
	struct front_env *env = c->w->env;

	if (more > GRPC_CONN_MEM - c->mem_bytes || env->buf_bytes + more > env->cfg->max_buffer_memory)
		return false;
	c->mem_bytes += more;
	env->buf_bytes += more;
	env->front_bytes[FRONT_GRPC] += more;
	return true;
}

static void grpc_mem_give(struct grpc_conn *c, size_t less)
{
	struct front_env *env = c->w->env;

	c->mem_bytes -= less;
	env->buf_bytes -= less;
	env->front_bytes[FRONT_GRPC] -= less;
}

void *grpc_mem_alloc(struct grpc_conn *c, size_t size)
{
	union grpc_mem_head *h;

	if (size > GRPC_CONN_MEM || !grpc_mem_take(c, size + sizeof(*h)))
		return NULL;
	if (!(h = malloc(size + sizeof(*h)))) {
		grpc_mem_give(c, size + sizeof(*h));
		return NULL;
	}
	h->size = size + sizeof(*h);
	return h + 1;
}

void grpc_mem_free(struct grpc_conn *c, void *p)
{
	union grpc_mem_head *h = p;

	if (!p)
		return;
	h--;
	grpc_mem_give(c, h->size);
	free(h);
}

void *grpc_mem_realloc(struct grpc_conn *c, void *p, size_t size)
{
	union grpc_mem_head *h = p, *nh;
	size_t was;

	if (!p)
		return grpc_mem_alloc(c, size);
	if (size > GRPC_CONN_MEM)
		return NULL;
	h--;
	was = h->size;
	if (size + sizeof(*h) > was && !grpc_mem_take(c, size + sizeof(*h) - was))
		return NULL;
	if (!(nh = realloc(h, size + sizeof(*h)))) {
		if (size + sizeof(*h) > was)
			grpc_mem_give(c, size + sizeof(*h) - was);
		return NULL;
	}
	if (size + sizeof(*h) < was)
		grpc_mem_give(c, was - size - sizeof(*h));
	nh->size = size + sizeof(*h);
	return nh + 1;
}
