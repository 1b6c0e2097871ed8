/*
 * ngx_http_spoa_ratelimit.h - what the nginx module's files share (nginx's
 * side of agent/nginx_module/; the SPOP client core is spoa_client.h):
 *
 *   ngx_http_spoa_ratelimit_module.c    the module, its directives and
 *                                       configuration
 *   ngx_http_spoa_ratelimit_conn.c      the connections to the agents, per
 *                                       worker, on nginx's event loop
 *   ngx_http_spoa_ratelimit_request.c   the pre-access phase: a request's
 *                                       NOTIFY, its decision; the variables;
 *                                       the log phase: its lease given back
 */
#ifndef NGX_HTTP_SPOA_RATELIMIT_H
#define NGX_HTTP_SPOA_RATELIMIT_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_event_connect.h>
#include <ngx_http.h>

#include "agent/nginx_module/spoa_client.h"

#define SPOA_CONNS          2       /* connections per agent and worker */
#define SPOA_HELLO_TIMEOUT  1000    /* ms: connect + AGENT-HELLO */
#define SPOA_STUCK          1000    /* ms without a byte while requests wait */
#define SPOA_LIVED          1000    /* ms: a connection lost after this reconnects at once */
#define SPOA_BACKOFF_MIN    100
#define SPOA_BACKOFF_MAX    2000
#define SPOA_SECRET_MIN     16      /* spoa_ratelimit_key_secret, bytes: as the */
#define SPOA_SECRET_MAX     255     /* agent's key_secret (docs/CONFIG.md) */

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
    size_t                   need;        /* the largest sc_notify_need() of its
                                             locations (configuration) */
    ngx_str_t                need_file;   /* where that location's limits are */
    ngx_uint_t               need_line;
    uint32_t                 frame_said;  /* the max-frame-size last logged as
                                             too small for `need` (per worker) */
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
    ngx_uint_t               secret;      /* spoa_ratelimit_key_secret was set */
    uint8_t                  digest_key[16]; /* from the secret, else random per
                                             configuration (the master's) */
} spoa_main_conf_t;

typedef struct {
    spoa_agent_t            *agent;
} spoa_srv_conf_t;

#define SPOA_FAIL_OPEN    0
#define SPOA_FAIL_CLOSED  1

typedef struct {
    ngx_array_t             *limits;      /* spoa_limit_conf_t */
    size_t                   need;        /* sc_notify_need() of the limits, each
                                             value with a variable counted short */
    ngx_str_t                file;        /* where the first limit is */
    ngx_uint_t               line;
    ngx_uint_t               status;
    ngx_uint_t               fail;
    ngx_msec_t               timeout;
    ngx_http_complex_value_t *settle;     /* spoa_ratelimit_settle: the actual
                                             cost, read in the log phase */
} spoa_loc_conf_t;

typedef enum {
    SPOA_WAITING = 1,       /* NOTIFY sent or queued */
    SPOA_DECIDED,           /* the phase handler has to apply the decision */
    SPOA_APPLIED,           /* done: never counted again */
} spoa_state_e;

typedef struct spoa_ctx_s  spoa_ctx_t;

/* A request's answer, delivered by the connections (_conn.c) to the
 * request's side (_request.c), which sets it: res, or no decision and why
 * (the calls go one way, request -> connection; back only through this). */
typedef void (*spoa_answer_pt)(spoa_ctx_t *ctx, const struct sc_result *res,
    const char *why);

struct spoa_ctx_s {
    ngx_http_request_t      *r;
    spoa_answer_pt           answer;
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
};


extern ngx_module_t  ngx_http_spoa_ratelimit_module;

/* Requests (ngx_http_spoa_ratelimit_request.c). */
ngx_int_t spoa_handler(ngx_http_request_t *r);
/* The log phase: a concurrency limit's lease the request took, given back
 * (docs/NGINX.md, "Concurrency limits"); its reservation settled at the
 * cost spoa_ratelimit_settle says ("Costs known after the response"). */
ngx_int_t spoa_release_handler(ngx_http_request_t *r);
ngx_int_t spoa_add_variables(ngx_conf_t *cf);

/* Connections (ngx_http_spoa_ratelimit_conn.c). */
ngx_int_t spoa_init_process(ngx_cycle_t *cycle);
void spoa_exit_process(ngx_cycle_t *cycle);
ngx_int_t spoa_send(spoa_agent_t *agent, spoa_ctx_t *ctx);
/* The `release` (or `settle`) messages of l[0..n) (each with its lease or
 * reservation), sent on a connection that has room now, nobody waiting for
 * their ACK; none: not sent (the lease expires after lease_ms, the
 * reservation keeps its estimate). */
void spoa_release(spoa_agent_t *agent, const struct sc_limit *l, ngx_uint_t n);
void spoa_conn_lost(spoa_conn_t *sc, const char *why, ngx_err_t err);

#endif /* NGX_HTTP_SPOA_RATELIMIT_H */
