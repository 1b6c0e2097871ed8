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
 *   spoa_ratelimit_key_secret SECRET;                           http
 *   spoa_ratelimit_settle  $upstream_http_x_usage_tokens;       http, server, location
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
 * Keys: sent whole when the NOTIFY fits the agent's max-frame-size, else
 * the longest as a digest until it fits (spoa_client.h, "Keys"), keyed by
 * spoa_ratelimit_key_secret as the agent keys its own by key_secret, or
 * by a random key chosen here, in the master, once per configuration (all
 * workers share it; a reload chooses another). Each location's NOTIFY with
 * every key digested must fit the largest frame (16380 bytes: refused
 * here otherwise); an agent that allows less than some location needs is
 * logged once per worker when its AGENT-HELLO says so.
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
 *
 * Files (ngx_http_spoa_ratelimit.h): this one is the module, its
 * directives and configuration; ngx_http_spoa_ratelimit_conn.c the
 * connections, ngx_http_spoa_ratelimit_request.c the requests and the
 * variables.
 */
#include "agent/nginx_module/ngx_http_spoa_ratelimit.h"

#include <sys/random.h>


static ngx_int_t spoa_init(ngx_conf_t *cf);
static void *spoa_create_main_conf(ngx_conf_t *cf);
static char *spoa_init_main_conf(ngx_conf_t *cf, void *conf);
static void *spoa_create_srv_conf(ngx_conf_t *cf);
static char *spoa_merge_srv_conf(ngx_conf_t *cf, void *parent, void *child);
static void *spoa_create_loc_conf(ngx_conf_t *cf);
static char *spoa_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
static size_t spoa_limits_need(ngx_array_t *limits, ngx_uint_t reserve);
static char *spoa_set_agent(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *spoa_set_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *spoa_set_key_secret(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);


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

    { ngx_string("spoa_ratelimit_settle"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(spoa_loc_conf_t, settle),
      NULL },

    { ngx_string("spoa_ratelimit_key_secret"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      spoa_set_key_secret,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};

static ngx_http_module_t  spoa_module_ctx = {
    spoa_add_variables,                    /* preconfiguration */
    spoa_init,                             /* postconfiguration */
    spoa_create_main_conf,                 /* create main configuration */
    spoa_init_main_conf,                   /* init main configuration */
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

/* Without spoa_ratelimit_key_secret, a random digest key: chosen while
 * the master reads the configuration, so every worker it forks digests a
 * key alike; unknown outside this nginx. */
static char *
spoa_init_main_conf(ngx_conf_t *cf, void *conf)
{
    spoa_main_conf_t  *mcf = conf;

    if (mcf->secret) {
        return NGX_CONF_OK;
    }

    if (getrandom(mcf->digest_key, sizeof(mcf->digest_key), 0)
        != (ssize_t) sizeof(mcf->digest_key))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "spoa_ratelimit: no random digest key (getrandom)");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}

/* spoa_ratelimit_key_secret SECRET: the digest key derived as the agent
 * derives its own from key_secret (agent/hash.h, hash_digest_key). */
static char *
spoa_set_key_secret(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    spoa_main_conf_t  *mcf = conf;
    ngx_str_t         *value = cf->args->elts;

    if (mcf->secret) {
        return "is duplicate";
    }

    if (value[1].len < SPOA_SECRET_MIN || value[1].len > SPOA_SECRET_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "spoa_ratelimit_key_secret must be %d to %d bytes long",
                           SPOA_SECRET_MIN, SPOA_SECRET_MAX);
        return NGX_CONF_ERROR;
    }

    hash_digest_key(value[1].data, value[1].len, mcf->digest_key);
    mcf->secret = 1;
    return NGX_CONF_OK;
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
    lcf->settle = NGX_CONF_UNSET_PTR;
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
        conf->need = prev->need;
        conf->file = prev->file;
        conf->line = prev->line;
    }

    /* With spoa_ratelimit_settle each limit carries reserve=1 too. */
    ngx_conf_merge_ptr_value(conf->settle, prev->settle, NULL);
    if (conf->limits && conf->settle) {
        conf->need = spoa_limits_need(conf->limits, 1);
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

    /* What its agent must allow: said when an AGENT-HELLO allows less. */
    if (conf->limits && scf && conf->need > scf->agent->need) {
        scf->agent->need = conf->need;
        scf->agent->need_file = conf->file;
        scf->agent->need_line = conf->line;
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

/* A value of a limit for spoa_limits_need(): a constant as it is, one
 * with a variable as `var`. */
static struct spop_str
spoa_conf_value(ngx_http_complex_value_t *cv, const char *var, size_t len)
{
    struct spop_str  v = { NULL, 0 };

    if (cv != NULL && cv->lengths == NULL) {
        v.ptr = (const char *) cv->value.data;
        v.len = cv->value.len;
    } else if (cv != NULL) {
        v.ptr = var;
        v.len = len;
    }
    return v;
}

/* sc_notify_need() of a location's limits, a value with a variable
 * counted as a digested key (a key: the longest it is once digested) or as
 * one digit (the others: the shortest they can be). */
static size_t
spoa_limits_need(ngx_array_t *limits, ngx_uint_t reserve)
{
    static const char   digest[SC_DIGEST_LEN] = "#";
    ngx_uint_t          i;
    struct sc_limit     l[SC_MAX_LIMITS];
    spoa_limit_conf_t  *lc = limits->elts;

    for (i = 0; i < limits->nelts; i++) {
        ngx_memzero(&l[i], sizeof(l[i]));   /* every field: lease NULL (no release) */
        l[i].reserve = reserve != 0;    /* spoa_ratelimit_settle: reserve=1 */
        l[i].key = spoa_conf_value(lc[i].key, digest, sizeof(digest));
        l[i].window = spoa_conf_value(lc[i].window, "0", 1);
        l[i].limit = spoa_conf_value(lc[i].limit, "0", 1);
        l[i].ns = spoa_conf_value(lc[i].ns, "0", 1);
        l[i].cost = spoa_conf_value(lc[i].cost, "0", 1);
    }
    return sc_notify_need(l, limits->nelts);
}

/* One "name=value" parameter of spoa_ratelimit into lc: key, window,
 * limit, namespace or cost, once each, compiled as a complex value. */
static char *
spoa_limit_param(ngx_conf_t *cf, spoa_limit_conf_t *lc, ngx_str_t *param)
{
    ngx_str_t                           name, val;
    ngx_uint_t                          j;
    ngx_http_complex_value_t          **field;
    ngx_http_compile_complex_value_t    ccv;
    u_char                             *eq;

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

    eq = ngx_strlchr(param->data, param->data + param->len, '=');
    if (eq == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\": name=value expected", param);
        return NGX_CONF_ERROR;
    }

    name.data = param->data;
    name.len = eq - param->data;
    val.data = eq + 1;
    val.len = param->data + param->len - val.data;

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

    return NGX_CONF_OK;
}

/* spoa_ratelimit key=... window=... [limit=...] [namespace=...] [cost=...]; */
static char *
spoa_set_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    spoa_loc_conf_t  *lcf = conf;

    ngx_str_t          *value;
    ngx_uint_t          i;
    spoa_limit_conf_t  *lc;
    spoa_main_conf_t   *mcf;

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
        if (spoa_limit_param(cf, lc, &value[i]) != NGX_CONF_OK) {
            return NGX_CONF_ERROR;
        }
    }
    if (lc->key == NULL || lc->window == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "spoa_ratelimit needs key= and window=");
        return NGX_CONF_ERROR;
    }

    if (lcf->limits->nelts == 1) {
        lcf->file = cf->conf_file->file.name;
        lcf->line = cf->conf_file->line;
    }

    /* Whatever the keys, a request must fit some frame the agent may allow. */
    lcf->need = spoa_limits_need(lcf->limits, 0);
    if (lcf->need > SC_FRAME_SIZE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "the limits of this location need %uz bytes per "
                           "request with every key digested, over the largest SPOP "
                           "frame (%ui bytes): fewer limits or shorter values",
                           lcf->need, (ngx_uint_t) SC_FRAME_SIZE);
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

    /* A concurrency limit's lease, given back once the request is over
     * (no directive: docs/NGINX.md, "Concurrency limits"); a reservation
     * settled (spoa_ratelimit_settle). */
    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = spoa_release_handler;
    return NGX_OK;
}
