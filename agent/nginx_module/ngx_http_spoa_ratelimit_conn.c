/*
 * ngx_http_spoa_ratelimit_conn.c - the module's connections to its agents
 * (see the module's banner, "Connections"): SPOA_CONNS per agent and
 * worker, opened when the worker starts, on nginx's event loop; a
 * request's NOTIFY goes out on the next ready one (spoa_send), queued
 * requests follow as room comes back; a lost connection fails its
 * requests and is opened again, after a backoff when it did not live.
 */
#include "agent/nginx_module/ngx_http_spoa_ratelimit.h"

#include <netinet/tcp.h>

static void conn_open(spoa_conn_t *sc);

/* Sends the request's NOTIFY on a ready connection: the one this turn of
 * the event loop uses, else the others in order. NGX_OK:
 * sent; NGX_AGAIN: no room anywhere now; NGX_DECLINED: it can never be
 * sent (too big for a frame). */
ngx_int_t
spoa_send(spoa_agent_t *agent, spoa_ctx_t *ctx)
{
    ngx_uint_t        i, k;
    spoa_conn_t      *sc;
    enum sc_send_rc   rc;

    for (k = 0; k < SPOA_CONNS; k++) {
        i = (agent->next + k) % SPOA_CONNS;
        sc = &agent->conns[i];

        if (!sc_can_send(&sc->core)) {
            continue;
        }

        rc = sc_send(&sc->core, ctx->limits, ctx->nlimits, ctx, &ctx->slot);

        if (rc == SC_SENT) {
            /* The turn's requests share one write; the next turn goes to
             * the next connection (conn_flush_handler). */
            agent->next = i;
            ctx->conn = sc;
            if (!sc->waiting) {
                sc->waiting = 1;
                sc->unanswered = ngx_current_msec;
            }
            if (!sc->flush.posted) {
                ngx_post_event(&sc->flush, &ngx_posted_events);
            }
            return NGX_OK;
        }

        if (rc == SC_TOO_BIG) {
            return NGX_DECLINED;
        }
    }

    return NGX_AGAIN;
}

/* The ACK of a release: nobody waits for it. */
static void
spoa_released(spoa_ctx_t *ctx, const struct sc_result *res, const char *why)
{
    (void) ctx;
    (void) res;
    (void) why;
}

/* The user of every release's stream: outlives the request it came from. */
static spoa_ctx_t  spoa_release_ctx = { .answer = spoa_released };

void
spoa_release(spoa_agent_t *agent, const struct sc_limit *l, ngx_uint_t n)
{
    ngx_uint_t    i, k;
    uint32_t      slot;
    spoa_conn_t  *sc;

    for (k = 0; k < SPOA_CONNS; k++) {
        i = (agent->next + k) % SPOA_CONNS;
        sc = &agent->conns[i];

        if (sc_can_send(&sc->core)
            && sc_send(&sc->core, l, n, &spoa_release_ctx, &slot) == SC_SENT)
        {
            if (!sc->flush.posted) {
                ngx_post_event(&sc->flush, &ngx_posted_events);
            }
            return;
        }
    }
}

static void
agent_fail_waiting(spoa_agent_t *agent, const char *why)
{
    ngx_queue_t  *q;
    spoa_ctx_t   *ctx;

    /* Resuming one request may end others (an HTTP/2 connection): take
     * the head each time. */
    while (!ngx_queue_empty(&agent->waiting)) {
        q = ngx_queue_head(&agent->waiting);
        ctx = ngx_queue_data(q, spoa_ctx_t, queue);
        ctx->answer(ctx, NULL, why);
    }
}

/* Queued requests onto connections with room, in order. */
static void
agent_drain(spoa_agent_t *agent)
{
    ngx_int_t     rc;
    ngx_queue_t  *q;
    spoa_ctx_t   *ctx;

    while (!ngx_queue_empty(&agent->waiting)) {
        q = ngx_queue_head(&agent->waiting);
        ctx = ngx_queue_data(q, spoa_ctx_t, queue);

        rc = spoa_send(agent, ctx);
        if (rc == NGX_AGAIN) {
            return;
        }

        ngx_queue_remove(q);
        ctx->queued = 0;

        if (rc == NGX_DECLINED) {
            ctx->answer(ctx, NULL, "request too big");
        }
    }
}

static void
conn_fail_one(void *user, void *arg)
{
    spoa_ctx_t  *ctx = user;

    ctx->conn = NULL;   /* the stream is already freed */
    ctx->answer(ctx, NULL, arg);
}

static void
conn_close_socket(spoa_conn_t *sc)
{
    if (sc->flush.posted) {
        ngx_delete_posted_event(&sc->flush);
    }
    if (sc->hello.timer_set) {
        ngx_del_timer(&sc->hello);
    }
    if (sc->pc.connection) {
        ngx_close_connection(sc->pc.connection);
        sc->pc.connection = NULL;
    }
    sc->connected = 0;
    sc->waiting = 0;
}

/* The connection is gone: its requests fail, it is opened again. */
void
spoa_conn_lost(spoa_conn_t *sc, const char *why, ngx_err_t err)
{
    ngx_uint_t     was_ready;
    ngx_msec_t     delay;
    spoa_agent_t  *agent = sc->agent;

    was_ready = (sc->core.state == SC_READY);

    conn_close_socket(sc);
    sc_conn_stop(&sc->core);

    if (was_ready) {
        agent->ready--;
    }

    if (was_ready && ngx_current_msec - sc->ready_at >= SPOA_LIVED) {
        sc->backoff = 0;
        delay = 0;
        ngx_log_error(NGX_LOG_INFO, agent->log, err,
                      "spoa_ratelimit: connection to agent %V closed: %s",
                      &agent->name, why);
    } else {
        sc->addr++;   /* a name with several addresses: the next one */
        sc->backoff = sc->backoff ? ngx_min(sc->backoff * 2, SPOA_BACKOFF_MAX)
                                  : SPOA_BACKOFF_MIN;
        /* 75 % to 100 %: the workers do not all come back at once. */
        delay = sc->backoff - (ngx_msec_t) ngx_random() % (sc->backoff / 4 + 1);

        if (agent->ready == 0 && !agent->down) {
            agent->down = 1;
            ngx_log_error(NGX_LOG_ERR, agent->log, err,
                          "spoa_ratelimit: agent %V is down: %s",
                          &agent->name, why);
        }
    }

    /* Its requests in flight have no answer; they may have been counted,
     * so they are not sent again. */
    sc_fail_all(&sc->core, conn_fail_one, (void *) "connection lost");

    if (agent->down) {
        agent_fail_waiting(agent, "agent down");
    }

    if (!ngx_exiting && !ngx_terminate && !ngx_quit) {
        ngx_add_timer(&sc->retry, delay);
    }
}

static void
conn_ready(spoa_conn_t *sc)
{
    spoa_agent_t  *agent = sc->agent;

    if (sc->hello.timer_set) {
        ngx_del_timer(&sc->hello);
    }

    sc->ready_at = ngx_current_msec;
    agent->ready++;

    /* Some location's requests cannot fit what this agent allows, even
     * with every key digested: said once (per worker and frame size). */
    if (sc->core.max_frame < agent->need && agent->frame_said != sc->core.max_frame) {
        agent->frame_said = sc->core.max_frame;
        ngx_log_error(NGX_LOG_ERR, agent->log, 0,
                      "spoa_ratelimit: agent %V allows frames of %uD bytes, the "
                      "limits at %V:%ui need %uz with every key digested: "
                      "requests there with long keys get no decision (\"request "
                      "too big\"); raise the agent's max_frame_size to %uz",
                      &agent->name, sc->core.max_frame, &agent->need_file,
                      agent->need_line, agent->need, agent->need);
    }

    if (agent->down) {
        agent->down = 0;
        ngx_log_error(NGX_LOG_NOTICE, agent->log, 0,
                      "spoa_ratelimit: agent %V is up", &agent->name);
    }
}

static void
conn_flush(spoa_conn_t *sc)
{
    size_t             len;
    ssize_t            n;
    const uint8_t     *p;
    ngx_connection_t  *c = sc->pc.connection;

    if (c == NULL || !sc->connected) {
        return;
    }

    while ((len = sc_out_pending(&sc->core, &p)) > 0) {
        n = c->send(c, (u_char *) p, len);

        if (n == NGX_AGAIN) {
            if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
                spoa_conn_lost(sc, "cannot watch the socket", 0);
            }
            return;
        }

        if (n == NGX_ERROR) {
            spoa_conn_lost(sc, "send() failed", ngx_socket_errno);
            return;
        }

        sc_out_done(&sc->core, (size_t) n);
    }
}

static void
conn_flush_handler(ngx_event_t *ev)
{
    spoa_conn_t  *sc = ev->data;

    sc->agent->next = (sc->index + 1) % SPOA_CONNS;
    conn_flush(sc);

    /* Posted too when a stream is freed (spoa_detach): requests queued
     * for one go now. */
    if (!ngx_queue_empty(&sc->agent->waiting)) {
        agent_drain(sc->agent);
    }
}

/* The first event of a connection in progress: did connect() succeed?
 * NGX_OK: it is connected; NGX_ERROR: it is lost. */
static ngx_int_t
conn_connected(spoa_conn_t *sc, ngx_connection_t *c)
{
    int        e;
    socklen_t  len = sizeof(e);

    e = 0;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *) &e, &len) == -1) {
        e = ngx_socket_errno;
    }
    if (e) {
        spoa_conn_lost(sc, "connect() failed", e);
        return NGX_ERROR;
    }
    sc->connected = 1;
    return NGX_OK;
}

static void
conn_write_handler(ngx_event_t *wev)
{
    ngx_connection_t  *c = wev->data;
    spoa_conn_t       *sc = c->data;

    if (!sc->connected && conn_connected(sc, c) != NGX_OK) {
        return;
    }

    conn_flush(sc);

    /* Room in `out` again: requests queued for it may go. */
    if (sc->pc.connection == c && !ngx_queue_empty(&sc->agent->waiting)) {
        agent_drain(sc->agent);
    }
}

static void
conn_read_handler(ngx_event_t *rev)
{
    int                rc;
    size_t             room;
    ngx_uint_t         level;
    ssize_t            n;
    uint8_t           *p;
    spoa_ctx_t        *ctx;
    struct sc_event    ev;
    ngx_connection_t  *c = rev->data;
    spoa_conn_t       *sc = c->data;
    spoa_agent_t      *agent = sc->agent;

    if (!sc->connected) {
        if (conn_connected(sc, c) != NGX_OK) {
            return;
        }
        conn_flush(sc);
        if (sc->pc.connection != c) {
            return;
        }
    }

    do {
        room = sc_in_room(&sc->core, &p);
        n = c->recv(c, p, room);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n == 0) {
            spoa_conn_lost(sc, sc->core.state == SC_HELLO ? "closed before the AGENT-HELLO"
                                                     : "closed by the agent", 0);
            return;
        }

        if (n == NGX_ERROR) {
            spoa_conn_lost(sc, "recv() failed", ngx_socket_errno);
            return;
        }

        sc_in_add(&sc->core, (size_t) n);
        sc->waiting = 0;

        while ((rc = sc_next(&sc->core, &ev)) == 1) {
            if (ev.type == SC_EV_READY) {
                conn_ready(sc);
                agent_drain(agent);
                continue;
            }

            ctx = ev.user;
            ctx->conn = NULL;   /* the stream is freed */
            ctx->answer(ctx, &ev.result, NULL);
        }

        if (rc < 0) {
            if (sc->core.by_agent) {
                /* Status 0 (the agent stops) and 2 (its idle timeout) are
                 * ordinary closes. */
                level = (sc->core.err == SPOP_ERR_NONE || sc->core.err == SPOP_ERR_TIMEOUT)
                        ? NGX_LOG_INFO : NGX_LOG_ERR;
                ngx_log_error(level, agent->log, 0,
                              "spoa_ratelimit: agent %V disconnected: status %d (%s)",
                              &agent->name, (int) sc->core.err, sc->core.detail);
                spoa_conn_lost(sc, "disconnected by the agent", 0);
            } else {
                ngx_log_error(NGX_LOG_ERR, agent->log, 0,
                              "spoa_ratelimit: agent %V: %s (status %d)",
                              &agent->name, sc->core.why, (int) sc->core.err);
                /* Tell the agent why, as HAProxy would. */
                (void) sc_disconnect(&sc->core, sc->core.err);
                conn_flush(sc);
                if (sc->pc.connection == c) {
                    spoa_conn_lost(sc, "protocol error", 0);
                }
            }
            return;
        }

    } while (rev->ready);

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        spoa_conn_lost(sc, "cannot watch the socket", 0);
        return;
    }

    /* Streams came back: queued requests may go. */
    agent_drain(agent);
}

static void
conn_hello_timeout(ngx_event_t *ev)
{
    spoa_conn_lost(ev->data, "no AGENT-HELLO within a second", 0);
}

static void
conn_retry_handler(ngx_event_t *ev)
{
    spoa_conn_t  *sc = ev->data;

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }
    conn_open(sc);
}

static void
conn_open(spoa_conn_t *sc)
{
    int                on = 1;
    ngx_int_t          rc;
    ngx_addr_t        *addr;
    ngx_connection_t  *c;
    spoa_agent_t      *agent = sc->agent;

    ngx_memzero(&sc->pc, sizeof(ngx_peer_connection_t));
    addr = &agent->addrs[sc->addr % agent->naddrs];
    sc->pc.sockaddr = addr->sockaddr;
    sc->pc.socklen = addr->socklen;
    sc->pc.name = &agent->name;
    sc->pc.get = ngx_event_get_peer;
    /* nginx logs a refused connect() at "error" on every try; we say it
     * once, when the agent goes down. */
    sc->log = *agent->log;
    if (sc->log.log_level > NGX_LOG_CRIT) {
        sc->log.log_level = NGX_LOG_CRIT;
    }
    sc->pc.log = &sc->log;
    sc->pc.log_error = NGX_ERROR_ERR;

    rc = ngx_event_connect_peer(&sc->pc);

    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
        sc->pc.connection = NULL;
        spoa_conn_lost(sc, "connect() failed", ngx_socket_errno);
        return;
    }

    c = sc->pc.connection;
    c->data = sc;
    c->read->handler = conn_read_handler;
    c->write->handler = conn_write_handler;

    if (addr->sockaddr->sa_family != AF_UNIX) {
        /* NOTIFYs are small and must not wait for an ACK of the last. */
        (void) setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    }

    sc_conn_start(&sc->core);
    ngx_add_timer(&sc->hello, SPOA_HELLO_TIMEOUT);

    if (rc == NGX_OK) {
        sc->connected = 1;
        conn_flush(sc);
    }
}

ngx_int_t
spoa_init_process(ngx_cycle_t *cycle)
{
    u_char             *mem;
    size_t              size;
    ngx_uint_t          i, j;
    spoa_conn_t        *sc;
    spoa_agent_t      **agents, *agent;
    spoa_main_conf_t   *mcf;

    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) {
        return NGX_OK;
    }

    mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_spoa_ratelimit_module);
    if (mcf == NULL || !mcf->used) {
        return NGX_OK;   /* agents nobody asks: no connection */
    }

    agents = mcf->agents.elts;
    size = SC_IN_SIZE + SC_OUT_SIZE + SC_SLOTS * sizeof(struct sc_slot);

    for (i = 0; i < mcf->agents.nelts; i++) {
        agent = agents[i];
        agent->log = cycle->log;
        ngx_queue_init(&agent->waiting);

        agent->conns = ngx_calloc(SPOA_CONNS * sizeof(spoa_conn_t), cycle->log);
        if (agent->conns == NULL) {
            return NGX_ERROR;
        }

        for (j = 0; j < SPOA_CONNS; j++) {
            sc = &agent->conns[j];
            /* Buffers and slots, once for the life of the worker. */
            mem = ngx_alloc(size, cycle->log);
            if (mem == NULL) {
                return NGX_ERROR;
            }
            sc->mem = mem;
            sc_conn_init(&sc->core, mem, SC_IN_SIZE, mem + SC_IN_SIZE, SC_OUT_SIZE,
                         (struct sc_slot *) (void *) (mem + SC_IN_SIZE + SC_OUT_SIZE),
                         SC_SLOTS, mcf->digest_key);
            sc->agent = agent;
            sc->index = j;

            sc->retry.handler = conn_retry_handler;
            sc->retry.data = sc;
            sc->retry.log = cycle->log;
            sc->retry.cancelable = 1;

            sc->hello.handler = conn_hello_timeout;
            sc->hello.data = sc;
            sc->hello.log = cycle->log;
            sc->hello.cancelable = 1;

            sc->flush.handler = conn_flush_handler;
            sc->flush.data = sc;
            sc->flush.log = cycle->log;
        }

        agent->started = 1;
        for (j = 0; j < SPOA_CONNS; j++) {
            conn_open(&agent->conns[j]);
        }
    }

    return NGX_OK;
}

void
spoa_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t          i, j;
    spoa_conn_t        *sc;
    spoa_agent_t      **agents;
    spoa_main_conf_t   *mcf;

    mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_spoa_ratelimit_module);
    if (mcf == NULL) {
        return;
    }

    agents = mcf->agents.elts;
    for (i = 0; i < mcf->agents.nelts; i++) {
        if (agents[i]->conns == NULL) {
            continue;
        }
        for (j = 0; j < SPOA_CONNS; j++) {
            sc = &agents[i]->conns[j];
            if (sc->core.state == SC_READY && sc_disconnect(&sc->core, SPOP_ERR_NONE) == 0) {
                conn_flush(sc);   /* best effort: a goodbye if it fits */
            }
            if (sc->retry.timer_set) {
                ngx_del_timer(&sc->retry);
            }
            conn_close_socket(sc);
            ngx_free(sc->mem);
            sc->mem = NULL;
        }
        ngx_free(agents[i]->conns);
        agents[i]->conns = NULL;
    }
}
