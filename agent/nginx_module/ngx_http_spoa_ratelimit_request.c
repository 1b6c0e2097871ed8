/*
 * ngx_http_spoa_ratelimit_request.c - the module's requests (see the
 * module's banner, "Requests"): the pre-access phase handler evaluates the
 * location's limits, sends the NOTIFY or queues the request, and applies
 * the decision once the ACK, the timeout or the loss of the connection
 * made it; the $spoa_ratelimit_* variables read it.
 */
#include "agent/nginx_module/ngx_http_spoa_ratelimit.h"

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
        spoa_conn_t  *sc = ctx->conn;

        sc_cancel(&sc->core, ctx->slot);
        ctx->conn = NULL;

        /* A stream is free (a request that timed out or went away): a
         * request queued for one goes in this turn of the loop, not at
         * the connection's next read, which a stuck agent may never
         * bring. */
        if (!ngx_queue_empty(&sc->agent->waiting) && !sc->flush.posted) {
            ngx_post_event(&sc->flush, &ngx_posted_events);
        }
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

/* The request's answer (spoa_answer_pt): res, or none and why. */
static void
spoa_answered(spoa_ctx_t *ctx, const struct sc_result *res, const char *why)
{
    spoa_detach(ctx);
    spoa_decide(ctx, res, why);
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

    spoa_answered(ctx, NULL, "timeout");   /* ctx may be gone now */

    if (stuck && sc->core.state != SC_DOWN) {
        spoa_conn_lost(sc, "no answer for a second", 0);
    }
}

/* Evaluates the location's limits into the request's pool, keys as they
 * are: the connection sizes the NOTIFY to the agent's frame, digesting the
 * longest keys when it must (spoa_client.h, "Keys"). */
static ngx_int_t
spoa_eval(ngx_http_request_t *r, spoa_loc_conf_t *lcf, struct sc_limit **out,
    ngx_uint_t *n)
{
    ngx_str_t           v;
    ngx_uint_t          i;
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

        SPOA_EVAL(window, l[i].window)
        SPOA_EVAL(limit, l[i].limit)
        SPOA_EVAL(ns, l[i].ns)
        SPOA_EVAL(cost, l[i].cost)
        l[i].reserve = lcf->settle != NULL;
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

ngx_int_t
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
    ctx->answer = spoa_answered;
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

ngx_int_t
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


/* The request's reservation (the ACK's plain `reservation`: every limit of
 * its first one's namespace and key) settled at the cost
 * spoa_ratelimit_settle says, in one `settle` message; an empty or absent
 * value keeps the estimate. */
static void
spoa_settle(ngx_http_request_t *r, spoa_ctx_t *ctx)
{
    ngx_str_t             v;
    ngx_uint_t            i;
    struct sc_limit      *l;
    spoa_loc_conf_t      *lcf;

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_spoa_ratelimit_module);
    if (lcf == NULL || lcf->settle == NULL || !(ctx->res.has & SC_HAS_RESERVATION)
        || ctx->res.reservation_len == 0
        || ngx_http_complex_value(r, lcf->settle, &v) != NGX_OK || v.len == 0)
    {
        return;
    }

    for (i = 0; i < ctx->nlimits && ctx->limits[i].key.len == 0; i++) {
        /* the first limit sent */
    }

    l = ngx_palloc(r->pool, sizeof(struct sc_limit));
    if (i == ctx->nlimits || l == NULL) {
        return;
    }

    *l = ctx->limits[i];
    l->limit.ptr = NULL;
    l->lease.ptr = NULL;
    l->reserve = 0;
    l->reservation.ptr = ctx->res.reservation;
    l->reservation.len = ctx->res.reservation_len;
    l->cost.ptr = (const char *) v.data;
    l->cost.len = v.len;
    spoa_release(ctx->agent, l, 1);
    ctx->res.has &= ~SC_HAS_RESERVATION;    /* once */
}


/* The log phase: the request is over, the lease it took (a concurrency
 * limit, the ACK's `lease`) goes back. Each limit's message carries it:
 * the namespace that gave it frees it, the others free nothing (the id
 * names its key and namespace), so only one lease per request is given
 * back; no connection with room now: the lease expires (lease_ms). */
ngx_int_t
spoa_release_handler(ngx_http_request_t *r)
{
    ngx_uint_t        i;
    spoa_ctx_t       *ctx;
    struct sc_limit  *l;

    ctx = spoa_get_ctx(r);
    if (ctx != NULL && ctx->agent != NULL) {
        spoa_settle(r, ctx);
    }

    if (ctx == NULL || ctx->agent == NULL || !(ctx->res.has & SC_HAS_LEASE)
        || ctx->res.lease_len == 0)
    {
        return NGX_OK;
    }

    l = ngx_palloc(r->pool, ctx->nlimits * sizeof(struct sc_limit));
    if (l == NULL) {
        return NGX_OK;
    }

    for (i = 0; i < ctx->nlimits; i++) {
        l[i] = ctx->limits[i];
        l[i].lease.ptr = ctx->res.lease;
        l[i].lease.len = ctx->res.lease_len;
    }

    spoa_release(ctx->agent, l, ctx->nlimits);
    ctx->res.has &= ~SC_HAS_LEASE;     /* once */
    return NGX_OK;
}
