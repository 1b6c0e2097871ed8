/*
 * ngx_http_spoa_ratelimit_module.c - nginx asks spoa-ratelimit over SPOP,
 * as HAProxy does: one NOTIFY per request with all of its location's
 * limits, one ACK, one decision.
 *
 *   spoa_ratelimit_agent   127.0.0.1:12345 | unix:/path;       http, server
 *   spoa_ratelimit         key=... window=... [limit=...] [namespace=...]
 *                          [cost=...];                          location (repeatable)
 *   spoa_ratelimit_status  429;                                 http, server, location
 *   spoa_ratelimit_fail    open | closed;                       http, server, location
 *   spoa_ratelimit_timeout 50ms;                                http, server, location
 *   $spoa_ratelimit_remaining, _reset, _retry_after, _exceeded, _error,
 *   _limit, _window
 *
 * Connections: each worker keeps SPOA_CONNS connections to each agent,
 * opened at worker start on nginx's event loop: non-blocking, HELLO once,
 * then pipelined NOTIFYs (a request picks the next ready connection in
 * turn), ACKs matched by stream and frame id (spoa_client.c, the pure
 * core). NOTIFYs queued during one turn of the event loop go out in one
 * write (a posted event). A lost connection is opened again at once if it
 * had lived a second, else after a backoff doubling from 100 ms to 2 s.
 * The agent is "down" once an attempt fails while no connection is ready:
 * requests then fail at once instead of waiting, until a connection is
 * ready again. A connection that got nothing back for a second while
 * requests wait on it is closed as stuck (an agent stopped or paused).
 *
 * Requests: the pre-access phase (where limit_req runs: `satisfy any`
 * cannot skip it) evaluates the limits, sends the NOTIFY (or queues the
 * request while connections are being opened or are full) and returns
 * NGX_AGAIN; the ACK, the timeout (spoa_ratelimit_timeout) or the loss of
 * the connection decides and runs the phases again. Exceeded: the status
 * with Retry-After. No decision (agent down, timeout, connection lost, an
 * ACK without `exceeded`): fail open passes, fail closed answers 503 with
 * Retry-After: 1. Once decided, a request is not counted again (internal
 * redirects, error pages), as with limit_req; subrequests are not counted.
 *
 * Memory: per connection, buffers and stream slots allocated once when
 * the worker starts; per request, the context and the evaluated values in
 * the request's pool, nothing else.
 */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_event_connect.h>
#include <ngx_http.h>
#include <ngx_sha1.h>

#include <netinet/tcp.h>

#include "agent/nginx/spoa_client.h"

#define SPOA_CONNS          2       /* connections per agent and worker */
#define SPOA_HELLO_TIMEOUT  1000    /* ms: connect + AGENT-HELLO */
#define SPOA_STUCK          1000    /* ms without a byte while requests wait */
#define SPOA_LIVED          1000    /* ms: a connection lost after this reconnects at once */
#define SPOA_BACKOFF_MIN    100
#define SPOA_BACKOFF_MAX    2000

typedef struct spoa_agent_s spoa_agent_t;

typedef struct {
    struct sc_conn           core;
    ngx_peer_connection_t    pc;
    spoa_agent_t            *agent;
    ngx_event_t              retry;       /* backoff, then connect */
    ngx_event_t              hello;       /* no AGENT-HELLO in time */
    ngx_event_t              flush;       /* posted: write what the turn queued */
    ngx_log_t                log;         /* the cycle's, quieter (see conn_open) */
    ngx_msec_t               backoff;
    ngx_msec_t               ready_at;
    ngx_msec_t               unanswered;  /* the first NOTIFY out since the last byte in */
    ngx_uint_t               index;
    ngx_uint_t               addr;        /* the agent's address to try, in turn after failures */
    unsigned                 connected:1;
    unsigned                 waiting:1;   /* `unanswered` is set */
    u_char                  *mem;
} spoa_conn_t;

struct spoa_agent_s {
    ngx_str_t                name;        /* as configured */
    ngx_addr_t              *addrs;
    ngx_uint_t               naddrs;
    spoa_conn_t             *conns;       /* SPOA_CONNS, per worker */
    ngx_uint_t               next;        /* the next connection to try */
    ngx_uint_t               ready;       /* connections ready */
    ngx_queue_t              waiting;     /* requests without a stream yet */
    ngx_log_t               *log;
    unsigned                 down:1;
    unsigned                 started:1;
};

typedef struct {
    ngx_http_complex_value_t *key;
    ngx_http_complex_value_t *window;
    ngx_http_complex_value_t *limit;
    ngx_http_complex_value_t *ns;
    ngx_http_complex_value_t *cost;
} spoa_limit_conf_t;

typedef struct {
    ngx_array_t              agents;      /* spoa_agent_t * */
    ngx_uint_t               used;        /* some location has spoa_ratelimit */
} spoa_main_conf_t;

typedef struct {
    spoa_agent_t            *agent;
} spoa_srv_conf_t;

#define SPOA_FAIL_OPEN    0
#define SPOA_FAIL_CLOSED  1

typedef struct {
    ngx_array_t             *limits;      /* spoa_limit_conf_t */
    ngx_uint_t               status;
    ngx_uint_t               fail;
    ngx_msec_t               timeout;
} spoa_loc_conf_t;

typedef enum {
    SPOA_WAITING = 1,       /* NOTIFY sent or queued */
    SPOA_DECIDED,           /* the phase handler has to apply the decision */
    SPOA_APPLIED,           /* done: never counted again */
} spoa_state_e;

typedef struct {
    ngx_http_request_t      *r;
    spoa_agent_t            *agent;
    spoa_conn_t             *conn;        /* its NOTIFY is in flight there */
    uint32_t                 slot;
    ngx_queue_t              queue;       /* in agent->waiting */
    ngx_event_t              timer;
    struct sc_limit         *limits;
    ngx_uint_t               nlimits;
    spoa_state_e             state;
    ngx_int_t                rc;          /* NGX_DECLINED or a status */
    ngx_uint_t               retry_after;
    struct sc_result         res;
    const char              *error;       /* ours, when res has none */
    unsigned                 queued:1;
} spoa_ctx_t;


static ngx_int_t spoa_add_variables(ngx_conf_t *cf);
static ngx_int_t spoa_init(ngx_conf_t *cf);
static void *spoa_create_main_conf(ngx_conf_t *cf);
static void *spoa_create_srv_conf(ngx_conf_t *cf);
static char *spoa_merge_srv_conf(ngx_conf_t *cf, void *parent, void *child);
static void *spoa_create_loc_conf(ngx_conf_t *cf);
static char *spoa_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
static char *spoa_set_agent(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *spoa_set_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static ngx_int_t spoa_init_process(ngx_cycle_t *cycle);
static void spoa_exit_process(ngx_cycle_t *cycle);

static void conn_open(spoa_conn_t *sc);
static void conn_lost(spoa_conn_t *sc, const char *why, ngx_err_t err);
static void conn_flush(spoa_conn_t *sc);
static void agent_drain(spoa_agent_t *agent);


static ngx_conf_enum_t  spoa_fail_modes[] = {
    { ngx_string("open"), SPOA_FAIL_OPEN },
    { ngx_string("closed"), SPOA_FAIL_CLOSED },
    { ngx_null_string, 0 }
};

static ngx_conf_num_bounds_t  spoa_status_bounds = {
    ngx_conf_check_num_bounds, 400, 599
};

static ngx_command_t  spoa_commands[] = {

    { ngx_string("spoa_ratelimit_agent"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_CONF_TAKE1,
      spoa_set_agent,
      NGX_HTTP_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("spoa_ratelimit"),
      NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      spoa_set_limit,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("spoa_ratelimit_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(spoa_loc_conf_t, status),
      &spoa_status_bounds },

    { ngx_string("spoa_ratelimit_fail"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(spoa_loc_conf_t, fail),
      &spoa_fail_modes },

    { ngx_string("spoa_ratelimit_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(spoa_loc_conf_t, timeout),
      NULL },

      ngx_null_command
};

static ngx_http_module_t  spoa_module_ctx = {
    spoa_add_variables,                    /* preconfiguration */
    spoa_init,                             /* postconfiguration */
    spoa_create_main_conf,                 /* create main configuration */
    NULL,                                  /* init main configuration */
    spoa_create_srv_conf,                  /* create server configuration */
    spoa_merge_srv_conf,                   /* merge server configuration */
    spoa_create_loc_conf,                  /* create location configuration */
    spoa_merge_loc_conf                    /* merge location configuration */
};

ngx_module_t  ngx_http_spoa_ratelimit_module = {
    NGX_MODULE_V1,
    &spoa_module_ctx,                      /* module context */
    spoa_commands,                         /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    spoa_init_process,                     /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    spoa_exit_process,                     /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* ------------------------------------------------------------ requests --- */

static void spoa_cleanup(void *data);

/* The request's context, also after an internal redirect (which clears
 * the module contexts): found again through its pool cleanup, as realip
 * does. Subrequests share the main request's pool. */
static spoa_ctx_t *
spoa_get_ctx(ngx_http_request_t *r)
{
    spoa_ctx_t          *ctx;
    ngx_pool_cleanup_t  *cln;

    r = r->main;
    ctx = ngx_http_get_module_ctx(r, ngx_http_spoa_ratelimit_module);
    if (ctx) {
        return ctx;
    }

    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == spoa_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r, ctx, ngx_http_spoa_ratelimit_module);
            return ctx;
        }
    }

    return NULL;
}

/* What the request gets: from the ACK, or the fail mode without one. */
static void
spoa_decide(spoa_ctx_t *ctx, const struct sc_result *res, const char *error)
{
    spoa_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(ctx->r, ngx_http_spoa_ratelimit_module);

    if (res) {
        ctx->res = *res;
    }
    ctx->error = error;
    ctx->state = SPOA_DECIDED;

    if (res && (res->has & SC_HAS_EXCEEDED)) {
        if (res->exceeded) {
            ctx->rc = lcf->status;
            ctx->retry_after = (res->has & SC_HAS_RETRY_AFTER) && res->retry_after > 0
                               ? (ngx_uint_t) res->retry_after : 1;
        } else {
            ctx->rc = NGX_DECLINED;
        }
        return;
    }

    /* No decision: an ACK without "exceeded" says why in "error". */
    if (res && !error && !(res->has & SC_HAS_ERROR)) {
        ctx->error = "no decision";
    }

    if (lcf->fail == SPOA_FAIL_CLOSED) {
        ctx->rc = NGX_HTTP_SERVICE_UNAVAILABLE;
        ctx->retry_after = 1;
    } else {
        ctx->rc = NGX_DECLINED;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->r->connection->log, 0,
                   "spoa_ratelimit: no decision (%s)",
                   ctx->error ? ctx->error : "agent error");
}

/* Leaves the agent: timer, queue, stream. */
static void
spoa_detach(spoa_ctx_t *ctx)
{
    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    if (ctx->queued) {
        ngx_queue_remove(&ctx->queue);
        ctx->queued = 0;
    }

    if (ctx->conn) {
        sc_cancel(&ctx->conn->core, ctx->slot);
        ctx->conn = NULL;
    }
}

/* Runs the phases again: the pre-access handler applies the decision. */
static void
spoa_resume(spoa_ctx_t *ctx)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->r;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}

static void
spoa_fail_request(spoa_ctx_t *ctx, const char *why)
{
    spoa_detach(ctx);
    spoa_decide(ctx, NULL, why);
    spoa_resume(ctx);
}

static void
spoa_cleanup(void *data)
{
    spoa_ctx_t  *ctx = data;

    if (ctx->state == SPOA_WAITING) {
        spoa_detach(ctx);
    }
}

static void
spoa_timeout(ngx_event_t *ev)
{
    ngx_uint_t    stuck;
    spoa_ctx_t   *ctx = ev->data;
    spoa_conn_t  *sc = ctx->conn;

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ev->log, 0, "spoa_ratelimit: timeout");

    /* A connection that sent requests and got nothing back for a second
     * is stuck (the agent stopped or paused): given up, opened again. */
    stuck = sc && sc->waiting && ngx_current_msec - sc->unanswered >= SPOA_STUCK;

    spoa_fail_request(ctx, "timeout");   /* ctx may be gone now */

    if (stuck && sc->core.state != SC_DOWN) {
        conn_lost(sc, "no answer for a second", 0);
    }
}

/* Sends the request's NOTIFY on a ready connection: the one this turn of
 * the event loop uses, else the others in order. NGX_OK:
 * sent; NGX_AGAIN: no room anywhere now; NGX_DECLINED: it can never be
 * sent (too big for a frame). */
static ngx_int_t
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

/* Evaluates the location's limits into the request's pool; a key longer
 * than SC_KEY_MAX becomes "#" and its SHA-1, so that a client's header
 * cannot make a frame too big (the agent digests "#..." keys again). */
static ngx_int_t
spoa_eval(ngx_http_request_t *r, spoa_loc_conf_t *lcf, struct sc_limit **out,
    ngx_uint_t *n)
{
    u_char              digest[20], *p;
    ngx_str_t           v;
    ngx_uint_t          i;
    ngx_sha1_t          sha1;
    struct sc_limit    *l;
    spoa_limit_conf_t  *lc;

    lc = lcf->limits->elts;
    l = ngx_pcalloc(r->pool, lcf->limits->nelts * sizeof(struct sc_limit));
    if (l == NULL) {
        return NGX_ERROR;
    }

#define SPOA_EVAL(field, dst)                                                 \
    if (lc[i].field) {                                                        \
        if (ngx_http_complex_value(r, lc[i].field, &v) != NGX_OK) {           \
            return NGX_ERROR;                                                 \
        }                                                                     \
        dst.ptr = v.data ? (const char *) v.data : "";                        \
        dst.len = v.len;                                                      \
    }

    for (i = 0; i < lcf->limits->nelts; i++) {
        SPOA_EVAL(key, l[i].key)

        if (l[i].key.len == 0) {
            continue;   /* an empty key: this limit does not apply */
        }

        if (l[i].key.len > SC_KEY_MAX) {
            ngx_sha1_init(&sha1);
            ngx_sha1_update(&sha1, l[i].key.ptr, l[i].key.len);
            ngx_sha1_final(digest, &sha1);
            p = ngx_pnalloc(r->pool, SC_DIGEST_TEXT);
            if (p == NULL) {
                return NGX_ERROR;
            }
            l[i].key.len = sc_digest_text((char *) p, digest, sizeof(digest));
            l[i].key.ptr = (const char *) p;
        }

        SPOA_EVAL(window, l[i].window)
        SPOA_EVAL(limit, l[i].limit)
        SPOA_EVAL(ns, l[i].ns)
        SPOA_EVAL(cost, l[i].cost)
    }

#undef SPOA_EVAL

    *out = l;
    *n = lcf->limits->nelts;
    return NGX_OK;
}

/* The decision as the phase's answer, with Retry-After on a denial. */
static ngx_int_t
spoa_apply(ngx_http_request_t *r, spoa_ctx_t *ctx)
{
    u_char           *p;
    ngx_table_elt_t  *h;

    ctx->state = SPOA_APPLIED;

    if (ctx->rc == NGX_DECLINED) {
        return NGX_DECLINED;
    }

    if (ctx->rc == NGX_HTTP_SERVICE_UNAVAILABLE && !(ctx->res.has & SC_HAS_EXCEEDED)) {
        /* Once per request: the agent's state changes are logged at
         * "error" and "notice" once each. */
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "spoa_ratelimit: no decision (%s), denied (fail closed)",
                      ctx->error ? ctx->error : "agent error");
    } else {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "spoa_ratelimit: limiting request, retry after %ui s",
                      ctx->retry_after);
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    h = ngx_list_push(&r->headers_out.headers);
    if (p == NULL || h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif
    ngx_str_set(&h->key, "Retry-After");
    h->value.data = p;
    h->value.len = ngx_sprintf(p, "%ui", ctx->retry_after) - p;

    return ctx->rc;
}

static ngx_int_t
spoa_handler(ngx_http_request_t *r)
{
    ngx_int_t            rc;
    ngx_uint_t           n;
    spoa_ctx_t          *ctx;
    spoa_agent_t        *agent;
    struct sc_limit     *limits;
    spoa_srv_conf_t     *scf;
    spoa_loc_conf_t     *lcf;
    ngx_pool_cleanup_t  *cln;

    if (r != r->main) {
        return NGX_DECLINED;
    }

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_spoa_ratelimit_module);
    if (lcf->limits == NULL) {
        return NGX_DECLINED;
    }

    ctx = spoa_get_ctx(r);
    if (ctx) {
        switch (ctx->state) {
        case SPOA_WAITING:
            return NGX_AGAIN;
        case SPOA_DECIDED:
            return spoa_apply(r, ctx);
        default:
            return NGX_DECLINED;   /* counted once per request */
        }
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "spoa_ratelimit: request pool: %uz bytes free, context %uz",
                   (size_t) (r->pool->current->d.end - r->pool->current->d.last),
                   sizeof(spoa_ctx_t));

    if (spoa_eval(r, lcf, &limits, &n) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (sc_count(limits, n) == 0) {
        return NGX_DECLINED;       /* every key empty: nothing to count */
    }

    cln = ngx_pool_cleanup_add(r->pool, sizeof(spoa_ctx_t));
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx = cln->data;
    ngx_memzero(ctx, sizeof(spoa_ctx_t));
    ctx->r = r;
    ctx->limits = limits;
    ctx->nlimits = n;
    ctx->state = SPOA_WAITING;
    ctx->timer.handler = spoa_timeout;
    ctx->timer.data = ctx;
    ctx->timer.log = r->connection->log;
    cln->handler = spoa_cleanup;
    ngx_http_set_ctx(r, ctx, ngx_http_spoa_ratelimit_module);

    scf = ngx_http_get_module_srv_conf(r, ngx_http_spoa_ratelimit_module);
    agent = scf->agent;

    if (agent == NULL || agent->conns == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "spoa_ratelimit: no spoa_ratelimit_agent for this server");
        spoa_decide(ctx, NULL, "no agent");
        return spoa_apply(r, ctx);
    }

    ctx->agent = agent;

    /* Queued requests go first. */
    rc = ngx_queue_empty(&agent->waiting) ? spoa_send(agent, ctx) : NGX_AGAIN;

    if (rc == NGX_DECLINED) {
        spoa_decide(ctx, NULL, "request too big");
        return spoa_apply(r, ctx);
    }

    if (rc == NGX_AGAIN) {
        if (agent->down || ngx_exiting) {
            spoa_decide(ctx, NULL, "agent down");
            return spoa_apply(r, ctx);
        }
        ngx_queue_insert_tail(&agent->waiting, &ctx->queue);
        ctx->queued = 1;
    }

    ngx_add_timer(&ctx->timer, lcf->timeout);

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_AGAIN;
}


/* ---------------------------------------------------------- connections --- */

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
        spoa_fail_request(ctx, why);
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
            spoa_fail_request(ctx, "request too big");
        }
    }
}

static void
conn_fail_one(void *user, void *arg)
{
    spoa_ctx_t  *ctx = user;

    ctx->conn = NULL;   /* the stream is already freed */
    spoa_fail_request(ctx, arg);
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
static void
conn_lost(spoa_conn_t *sc, const char *why, ngx_err_t err)
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
                conn_lost(sc, "cannot watch the socket", 0);
            }
            return;
        }

        if (n == NGX_ERROR) {
            conn_lost(sc, "send() failed", ngx_socket_errno);
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
}

static ngx_int_t
conn_test_connect(ngx_connection_t *c, ngx_err_t *err)
{
    int        e;
    socklen_t  len = sizeof(e);

    e = 0;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *) &e, &len) == -1) {
        e = ngx_socket_errno;
    }
    *err = e;
    return e ? NGX_ERROR : NGX_OK;
}

static void
conn_write_handler(ngx_event_t *wev)
{
    ngx_err_t          err;
    ngx_connection_t  *c = wev->data;
    spoa_conn_t       *sc = c->data;

    if (!sc->connected) {
        if (conn_test_connect(c, &err) != NGX_OK) {
            conn_lost(sc, "connect() failed", err);
            return;
        }
        sc->connected = 1;
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
    ngx_err_t          err;
    spoa_ctx_t        *ctx;
    struct sc_event    ev;
    ngx_connection_t  *c = rev->data;
    spoa_conn_t       *sc = c->data;
    spoa_agent_t      *agent = sc->agent;

    if (!sc->connected) {
        if (conn_test_connect(c, &err) != NGX_OK) {
            conn_lost(sc, "connect() failed", err);
            return;
        }
        sc->connected = 1;
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
            conn_lost(sc, sc->core.state == SC_HELLO ? "closed before the AGENT-HELLO"
                                                     : "closed by the agent", 0);
            return;
        }

        if (n == NGX_ERROR) {
            conn_lost(sc, "recv() failed", ngx_socket_errno);
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
            if (ctx->timer.timer_set) {
                ngx_del_timer(&ctx->timer);
            }
            spoa_decide(ctx, &ev.result, NULL);
            spoa_resume(ctx);
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
                conn_lost(sc, "disconnected by the agent", 0);
            } else {
                ngx_log_error(NGX_LOG_ERR, agent->log, 0,
                              "spoa_ratelimit: agent %V: %s (status %d)",
                              &agent->name, sc->core.why, (int) sc->core.err);
                /* Tell the agent why, as HAProxy would. */
                (void) sc_disconnect(&sc->core, sc->core.err);
                conn_flush(sc);
                if (sc->pc.connection == c) {
                    conn_lost(sc, "protocol error", 0);
                }
            }
            return;
        }

    } while (rev->ready);

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        conn_lost(sc, "cannot watch the socket", 0);
        return;
    }

    /* Streams came back: queued requests may go. */
    agent_drain(agent);
}

static void
conn_hello_timeout(ngx_event_t *ev)
{
    conn_lost(ev->data, "no AGENT-HELLO within a second", 0);
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
        conn_lost(sc, "connect() failed", ngx_socket_errno);
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

static ngx_int_t
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
                         SC_SLOTS);
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

static void
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


/* ------------------------------------------------------------ variables --- */

enum {
    SPOA_VAR_REMAINING,
    SPOA_VAR_RESET,
    SPOA_VAR_RETRY_AFTER,
    SPOA_VAR_EXCEEDED,
    SPOA_VAR_ERROR,
    SPOA_VAR_LIMIT,
    SPOA_VAR_WINDOW,
};

static ngx_int_t
spoa_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char      *p;
    uint64_t     x;
    unsigned     bit;
    spoa_ctx_t  *ctx;

    ctx = spoa_get_ctx(r);
    if (ctx == NULL || ctx->state == SPOA_WAITING) {
        v->not_found = 1;
        return NGX_OK;
    }

    switch (data) {
    case SPOA_VAR_EXCEEDED:
        if (!(ctx->res.has & SC_HAS_EXCEEDED)) {
            v->not_found = 1;
            return NGX_OK;
        }
        v->data = (u_char *) (ctx->res.exceeded ? "1" : "0");
        v->len = 1;
        goto found;

    case SPOA_VAR_ERROR:
        if (ctx->error) {
            v->data = (u_char *) ctx->error;
            v->len = ngx_strlen(ctx->error);
        } else if (ctx->res.has & SC_HAS_ERROR) {
            v->data = (u_char *) ctx->res.error;
            v->len = ctx->res.error_len;
        } else {
            v->not_found = 1;
            return NGX_OK;
        }
        goto found;

    case SPOA_VAR_REMAINING:   bit = SC_HAS_REMAINING;   x = ctx->res.remaining;   break;
    case SPOA_VAR_RESET:       bit = SC_HAS_RESET;       x = ctx->res.reset;       break;
    case SPOA_VAR_RETRY_AFTER: bit = SC_HAS_RETRY_AFTER; x = ctx->res.retry_after; break;
    case SPOA_VAR_LIMIT:       bit = SC_HAS_LIMIT;       x = ctx->res.limit;       break;
    default:                   bit = SC_HAS_WINDOW;      x = ctx->res.window;      break;
    }

    if (!(ctx->res.has & bit)) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }
    v->data = p;
    v->len = ngx_sprintf(p, "%uL", (unsigned long long) x) - p;

found:
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    return NGX_OK;
}

static ngx_http_variable_t  spoa_vars[] = {
    { ngx_string("spoa_ratelimit_remaining"), NULL, spoa_variable,
      SPOA_VAR_REMAINING, NGX_HTTP_VAR_NOCACHEABLE, 0 },
    { ngx_string("spoa_ratelimit_reset"), NULL, spoa_variable,
      SPOA_VAR_RESET, NGX_HTTP_VAR_NOCACHEABLE, 0 },
    { ngx_string("spoa_ratelimit_retry_after"), NULL, spoa_variable,
      SPOA_VAR_RETRY_AFTER, NGX_HTTP_VAR_NOCACHEABLE, 0 },
    { ngx_string("spoa_ratelimit_exceeded"), NULL, spoa_variable,
      SPOA_VAR_EXCEEDED, NGX_HTTP_VAR_NOCACHEABLE, 0 },
    { ngx_string("spoa_ratelimit_error"), NULL, spoa_variable,
      SPOA_VAR_ERROR, NGX_HTTP_VAR_NOCACHEABLE, 0 },
    { ngx_string("spoa_ratelimit_limit"), NULL, spoa_variable,
      SPOA_VAR_LIMIT, NGX_HTTP_VAR_NOCACHEABLE, 0 },
    { ngx_string("spoa_ratelimit_window"), NULL, spoa_variable,
      SPOA_VAR_WINDOW, NGX_HTTP_VAR_NOCACHEABLE, 0 },
      ngx_http_null_variable
};

static ngx_int_t
spoa_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = spoa_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }
        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


/* -------------------------------------------------------- configuration --- */

static void *
spoa_create_main_conf(ngx_conf_t *cf)
{
    spoa_main_conf_t  *mcf;

    mcf = ngx_pcalloc(cf->pool, sizeof(spoa_main_conf_t));
    if (mcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&mcf->agents, cf->pool, 2, sizeof(spoa_agent_t *)) != NGX_OK) {
        return NULL;
    }

    return mcf;
}

static void *
spoa_create_srv_conf(ngx_conf_t *cf)
{
    spoa_srv_conf_t  *scf;

    scf = ngx_pcalloc(cf->pool, sizeof(spoa_srv_conf_t));
    if (scf == NULL) {
        return NULL;
    }

    scf->agent = NGX_CONF_UNSET_PTR;
    return scf;
}

static char *
spoa_merge_srv_conf(ngx_conf_t *cf, void *parent, void *child)
{
    spoa_srv_conf_t  *prev = parent;
    spoa_srv_conf_t  *conf = child;

    ngx_conf_merge_ptr_value(conf->agent, prev->agent, NULL);
    return NGX_CONF_OK;
}

static void *
spoa_create_loc_conf(ngx_conf_t *cf)
{
    spoa_loc_conf_t  *lcf;

    lcf = ngx_pcalloc(cf->pool, sizeof(spoa_loc_conf_t));
    if (lcf == NULL) {
        return NULL;
    }

    /* lcf->limits = NULL */
    lcf->status = NGX_CONF_UNSET_UINT;
    lcf->fail = NGX_CONF_UNSET_UINT;
    lcf->timeout = NGX_CONF_UNSET_MSEC;
    return lcf;
}

static char *
spoa_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    spoa_loc_conf_t  *prev = parent;
    spoa_loc_conf_t  *conf = child;
    spoa_srv_conf_t  *scf;

    /* As limit_req: a level without spoa_ratelimit takes its parent's. */
    if (conf->limits == NULL) {
        conf->limits = prev->limits;
    }

    /* Locations are merged within their server, after it: its agent is
     * known here. */
    scf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_spoa_ratelimit_module);
    if (conf->limits && scf && (scf->agent == NULL || scf->agent == NGX_CONF_UNSET_PTR)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "spoa_ratelimit in a server without spoa_ratelimit_agent "
                           "(set it in the server or in http)");
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_uint_value(conf->status, prev->status, NGX_HTTP_TOO_MANY_REQUESTS);
    ngx_conf_merge_uint_value(conf->fail, prev->fail, SPOA_FAIL_OPEN);
    ngx_conf_merge_msec_value(conf->timeout, prev->timeout, 50);

    if (conf->timeout == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "spoa_ratelimit_timeout must not be 0");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}

static char *
spoa_set_agent(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    spoa_srv_conf_t   *scf = conf;
    ngx_str_t         *value;
    ngx_url_t          u;
    ngx_uint_t         i;
    spoa_agent_t      *agent, **agents, **slot;
    spoa_main_conf_t  *mcf;

    if (scf->agent != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;
    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_spoa_ratelimit_module);

    /* One agent (one set of connections per worker) per address. */
    agents = mcf->agents.elts;
    for (i = 0; i < mcf->agents.nelts; i++) {
        if (agents[i]->name.len == value[1].len
            && ngx_strncmp(agents[i]->name.data, value[1].data, value[1].len) == 0)
        {
            scf->agent = agents[i];
            return NGX_CONF_OK;
        }
    }

    ngx_memzero(&u, sizeof(ngx_url_t));
    u.url = value[1];
    u.no_resolve = 0;

    if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
        if (u.err) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s in spoa_ratelimit_agent \"%V\"",
                               u.err, &u.url);
        }
        return NGX_CONF_ERROR;
    }

    if (u.no_port && u.family != AF_UNIX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "no port in spoa_ratelimit_agent \"%V\"", &u.url);
        return NGX_CONF_ERROR;
    }

    if (u.naddrs == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "no address for spoa_ratelimit_agent \"%V\"", &u.url);
        return NGX_CONF_ERROR;
    }

    agent = ngx_pcalloc(cf->pool, sizeof(spoa_agent_t));
    slot = ngx_array_push(&mcf->agents);
    if (agent == NULL || slot == NULL) {
        return NGX_CONF_ERROR;
    }

    agent->name = value[1];
    agent->addrs = u.addrs;
    agent->naddrs = u.naddrs;
    *slot = agent;
    scf->agent = agent;

    return NGX_CONF_OK;
}

/* spoa_ratelimit key=... window=... [limit=...] [namespace=...] [cost=...]; */
static char *
spoa_set_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    spoa_loc_conf_t  *lcf = conf;

    ngx_str_t                          *value, name, val;
    ngx_uint_t                          i, j;
    spoa_limit_conf_t                  *lc;
    spoa_main_conf_t                   *mcf;
    ngx_http_complex_value_t          **field;
    ngx_http_compile_complex_value_t    ccv;

    static const struct {
        ngx_str_t  name;
        size_t     off;
    } fields[] = {
        { ngx_string("key"), offsetof(spoa_limit_conf_t, key) },
        { ngx_string("window"), offsetof(spoa_limit_conf_t, window) },
        { ngx_string("limit"), offsetof(spoa_limit_conf_t, limit) },
        { ngx_string("namespace"), offsetof(spoa_limit_conf_t, ns) },
        { ngx_string("cost"), offsetof(spoa_limit_conf_t, cost) },
    };

    if (lcf->limits == NULL) {
        lcf->limits = ngx_array_create(cf->pool, 2, sizeof(spoa_limit_conf_t));
        if (lcf->limits == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    if (lcf->limits->nelts >= SC_MAX_LIMITS) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "at most %ui spoa_ratelimit per location (the agent "
                           "counts %ui messages per NOTIFY)",
                           (ngx_uint_t) SC_MAX_LIMITS, (ngx_uint_t) SC_MAX_LIMITS);
        return NGX_CONF_ERROR;
    }

    lc = ngx_array_push(lcf->limits);
    if (lc == NULL) {
        return NGX_CONF_ERROR;
    }
    ngx_memzero(lc, sizeof(spoa_limit_conf_t));

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {
        u_char *eq = ngx_strlchr(value[i].data, value[i].data + value[i].len, '=');

        if (eq == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\": name=value expected", &value[i]);
            return NGX_CONF_ERROR;
        }

        name.data = value[i].data;
        name.len = eq - value[i].data;
        val.data = eq + 1;
        val.len = value[i].data + value[i].len - val.data;

        for (j = 0; j < sizeof(fields) / sizeof(fields[0]); j++) {
            if (fields[j].name.len == name.len
                && ngx_strncmp(fields[j].name.data, name.data, name.len) == 0)
            {
                break;
            }
        }

        if (j == sizeof(fields) / sizeof(fields[0])) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "unknown parameter \"%V\" (key, window, limit, "
                               "namespace, cost)", &name);
            return NGX_CONF_ERROR;
        }

        field = (ngx_http_complex_value_t **) ((char *) lc + fields[j].off);
        if (*field) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "duplicate parameter \"%V\"", &name);
            return NGX_CONF_ERROR;
        }

        if (val.len == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "empty parameter \"%V\"", &name);
            return NGX_CONF_ERROR;
        }

        *field = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
        if (*field == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
        ccv.cf = cf;
        ccv.value = &val;
        ccv.complex_value = *field;

        if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    if (lc->key == NULL || lc->window == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "spoa_ratelimit needs key= and window=");
        return NGX_CONF_ERROR;
    }

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_spoa_ratelimit_module);
    mcf->used = 1;

    return NGX_CONF_OK;
}

static ngx_int_t
spoa_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    spoa_main_conf_t           *mcf;
    ngx_http_core_main_conf_t  *cmcf;

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_spoa_ratelimit_module);

    if (!mcf->used) {
        return NGX_OK;
    }

    if (mcf->agents.nelts == 0) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "spoa_ratelimit is used but no spoa_ratelimit_agent is set");
        return NGX_ERROR;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = spoa_handler;
    return NGX_OK;
}
