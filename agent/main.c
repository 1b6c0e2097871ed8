/*
 * main.c - command line, configuration, the shared table, then the master.
 *
 *   spoa-ratelimit [-c FILE] [-l ADDR] [-w WORKERS] [-t] [-v] [-h]
 */
#include <getopt.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/balance.h"
#include "agent/config.h"
#include "agent/ctl.h"
#include "agent/log.h"
#include "agent/master.h"
#include "agent/metrics.h"
#include "agent/ratelimit.h"
#include "agent/reload.h"
#include "agent/sync.h"
#include "agent/topk.h"
#include "agent/shm.h"
#include "agent/worker.h"

#include <sys/random.h>

_Static_assert((int)NS_FULL_EVICT == (int)NS_FULL_EVICT &&
	       (int)NS_FULL_DENY == (int)NS_FULL_DENY &&
	       (int)NS_FULL_ALLOW == (int)NS_FULL_ALLOW, "on_table_full values");

static void usage(FILE *out)
{
	fprintf(out,
		"usage: spoa-ratelimit [-c FILE] [-l ADDR] [-w WORKERS] [-t] [-v] [-h]\n"
		"       spoa-ratelimit ctl [-c FILE] [--json] keys|reset|top|limits ... (ctl -h)\n"
		"  -c FILE     JSON configuration (docs/CONFIG.md); built-in defaults without it\n"
		"  -l ADDR     listen on HOST:PORT, [IPV6]:PORT or unix:/path (default 127.0.0.1:12345)\n"
		"  -w WORKERS  worker processes (default: number of CPUs)\n"
		"  -t          check the configuration and exit\n"
		"  -v          more logging (repeat for debug)\n"
		"  -h          this help\n");
}

/* Each worker may hold max_connections sockets: raise the soft limit on
 * open files towards that (up to the hard limit), or say why not. */
static void raise_nofile(const struct config *cfg)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)cfg->max_connections + 64;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < want)
		LOG(LOG_WARN, "open files limited to %llu: a worker cannot hold max_connections %u",
		    (unsigned long long)rl.rlim_cur, cfg->max_connections);
}

static int fail_config(const struct config_err *err)
{
	char line[1024];
	config_err_format(err, line, sizeof(line));
	fprintf(stderr, "spoa-ratelimit: bad configuration: %s\n", line);
	return 2;
}

/* The command line: -c FILE, -l ADDR, -w N, -t, -v..., -h. */
struct args {
	const char *file, *listen;
	int workers;                 /* -1: the configuration's */
	int verbose;
	bool check_only;
};

/* Reads the options into *a. Returns -1 to go on, else the exit status
 * (-h, or a bad option: usage printed). */
static int parse_args(int argc, char **argv, struct args *a)
{
	int opt;

	*a = (struct args){ .workers = -1 };
	while ((opt = getopt(argc, argv, "c:l:w:tvh")) != -1) {
		switch (opt) {
		case 'c': a->file = optarg; break;
		case 'l': a->listen = optarg; break;
		case 'w': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || v < 0 || v > 64) {
				fprintf(stderr, "spoa-ratelimit: -w: expected 0 (one per CPU) to 64 "
					"workers, got '%s'\n", optarg);
				return 2;
			}
			a->workers = v == 0 ? config_default_workers() : (int)v;
			break;
		}
		case 't': a->check_only = true; break;
		case 'v': a->verbose++; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	return -1;
}

/* The configuration: the file over the defaults, the command line over
 * both, checked; the log level set. Returns -1 to go on (*cfg loaded),
 * else the exit status (the reason printed). */
static int load_config(const struct args *a, struct config *cfg)
{
	struct config_err cerr;

	config_defaults(cfg);
	if (a->file && config_load(cfg, a->file, &cerr) < 0)
		return fail_config(&cerr);
	if (a->listen) {
		if (strlen(a->listen) >= sizeof(cfg->listen)) {
			fprintf(stderr, "spoa-ratelimit: -l: address too long\n");
			config_free(cfg);
			return 2;
		}
		snprintf(cfg->listen, sizeof(cfg->listen), "%s", a->listen);
	}
	if (a->workers > 0)
		cfg->workers = a->workers;
	if (config_check(cfg, &cerr) < 0) {
		if (!cerr.file[0])
			snprintf(cerr.file, sizeof(cerr.file), "%s", a->file ? a->file : "command line");
		config_free(cfg);
		return fail_config(&cerr);
	}
	log_level = cfg->log_level + a->verbose;
	if (log_level >= LOG_LEVEL_COUNT)
		log_level = LOG_LEVEL_COUNT - 1;
	return -1;
}

/* The library with every namespace: the whole table (and the state file),
 * or for -t a small one (nothing mapped for real, the running agent's
 * state file untouched). NULL with the reason printed; *status the exit
 * status then. */
static struct rl *open_library(const struct config *cfg, bool check_only, int *status)
{
	char err[256];
	struct rl *rl = check_only ? rl_new("spoa-ratelimit", cfg->max_keys > 1024 ? 1024
									 : cfg->max_keys, err, sizeof(err))
				   : rl_open("spoa-ratelimit", cfg->max_keys,
					     cfg->state_file[0] ? cfg->state_file : NULL, err,
					     sizeof(err));
	if (!rl) {
		fprintf(stderr, "spoa-ratelimit: %s\n", err);
		*status = 1;
		return NULL;
	}
	for (size_t i = 0; i < cfg->n_ns; i++) {
		struct ns_def o = cfg->ns[i];

		/* -t maps a small table: the shares were checked against
		 * max_keys by config_check(). */
		if (check_only)
			o.max_keys = 0;
		/* The handler finds a namespace's config by its index. */
		if (rl_new_namespace(rl, &o, err, sizeof(err)) < 0 ||
		    rl_namespace_index(rl, o.name, strlen(o.name)) != (int)i) {
			fprintf(stderr, "spoa-ratelimit: namespaces[%zu]: %s\n", i, err);
			rl_free(rl);
			*status = 2;
			return NULL;
		}
	}
	if (cfg->key_secret[0])
		rl_set_key_secret(rl, cfg->key_secret, strlen(cfg->key_secret));
	/* The limits per key set at run time: room for every namespace's
	 * max_limit_overrides (docs/CONFIG.md), after the table in the state
	 * file. */
	size_t total = 0, dropped = 0;
	for (size_t i = 0; i < cfg->n_ns; i++)
		total += ns_max_overrides(&cfg->ns[i]);
	if (!check_only && rl_limits_open(rl, total, &dropped, err, sizeof(err)) < 0) {
		fprintf(stderr, "spoa-ratelimit: state_file %s: %s\n", cfg->state_file, err);
		rl_free(rl);
		*status = 1;
		return NULL;
	}
	if (dropped)
		fprintf(stderr, "spoa-ratelimit: state_file %s: %zu limit override(s) of the last "
			"run dropped: the namespaces' max_limit_overrides add up to fewer now\n",
			cfg->state_file, dropped);
	return rl;
}

/* What the agent cannot see or enforce itself, said at start (and by
 * -t): the peers' timeouts against delay_max_ms, the HTTP callers'
 * limits, the digest key. */
static void warn_config(const struct config *cfg, const struct rl *rl)
{
	/* The peers' own timeouts must outlast a delayed answer, or they
	 * give up first and pass the request. */
	for (size_t i = 0; i < cfg->n_ns; i++)
		if (cfg->ns[i].delay_max_ms > 0)
			LOG(LOG_WARN, "namespace \"%s\" delays hits up to %u ms: HAProxy's "
			    "\"timeout processing\" (spoe-agent), nginx's proxy_read_timeout "
			    "(auth_request) and spoa_ratelimit_timeout (the nginx module) must be "
			    "longer, or they give up first (docs/CONFIG.md, delay_max_ms)",
			    cfg->ns[i].name, cfg->ns[i].delay_max_ms);
	/* Checks that name a limit where none is configured are refused over
	 * HTTP now: say so before nginx's checks meet a 400. Not of an
	 * envoy_config domain's namespace: its limits are its YAML's, per
	 * descriptor, and its windows have none of their own by design. */
	for (size_t i = 0; cfg->http_listen[0] && i < cfg->n_ns; i++) {
		const struct ns_def *n = &cfg->ns[i];
		for (size_t w = 0; !n->envoy && n->caller_limit != NS_CALLER_ANY &&
				   w < n->n_window_sizes; w++)
			if (ns_limit_of(n, n->window_sizes[w]) == NS_LIMIT_NONE) {
				LOG(LOG_WARN, "namespace \"%s\" configures no limit for window %u: "
				    "an HTTP check that names one is refused (400) unless it carries "
				    "http_admin_token; configure \"limit\", or caller_limit \"any\" "
				    "(docs/CONFIG.md)", n->name, n->window_sizes[w]);
				break;
			}
	}
	if (!cfg->key_secret[0] && rl_digest_key_is_public(rl))
		LOG(LOG_WARN, "no key_secret: keys over %d bytes are stored as a digest under a "
		    "public key, which anyone can compute; set key_secret (the same on every "
		    "node) to keep digests secret (docs/CONFIG.md)", RL_STORED_KEY_MAX);
}

/* For -t: could each front listen on its address? Returns 0, or -1 with
 * the reason in err. */
static int check_listeners(const struct config *cfg, char *err, size_t errlen)
{
	for (int f = 0; f < FRONT_COUNT; f++) {
		const char *addr = config_front_address(cfg, (enum front_id)f);
		if (addr[0] && master_check_listen(addr, err, errlen) < 0)
			return -1;
	}
	return 0;
}

/* Each front's listener, the metrics and the balance, made before fork
 * into *ls. Returns 0, or -1 with the reason in err (nothing left open). */
static int open_listeners(const struct config *cfg, struct worker_listeners *ls, char *err,
			  size_t errlen)
{
	int f = 0;

	for (; f < FRONT_COUNT; f++) {
		const char *addr = config_front_address(cfg, (enum front_id)f);
		ls->fd[f] = addr[0] ? master_listen(cfg, addr, err, errlen) : -1;
		if (addr[0] && ls->fd[f] < 0)
			break;
	}
	if (f == FRONT_COUNT && (ls->metrics = metrics_new(cfg->workers, err, errlen)))
		ls->balance = balance_new(cfg->workers, err, errlen);
	if (f == FRONT_COUNT && ls->balance)
		return 0;
	for (int g = 0; g < f && g < FRONT_COUNT; g++)
		if (ls->fd[g] >= 0)
			close(ls->fd[g]);
	metrics_free(ls->metrics);
	return -1;
}

/* "listening on 127.0.0.1:12345 (spop), 127.0.0.1:8081 (http) with ...":
 * every front that has an address; the stores of synced namespaces. */
static void log_start(const struct config *cfg)
{
	char on[FRONT_COUNT * (CONFIG_ADDR_MAX + 16)];
	size_t used = 0;

	on[0] = '\0';
	for (int f = 0; f < FRONT_COUNT; f++) {
		const char *addr = config_front_address(cfg, (enum front_id)f);
		if (addr[0])
			used += (size_t)snprintf(on + used, sizeof(on) - used, "%s%s (%s)",
						 used ? ", " : "", addr, front_name((enum front_id)f));
	}
	LOG(LOG_INFO, "listening on %s with %d worker(s), max_keys %zu, %zu namespace(s)", on,
	    cfg->workers, cfg->max_keys, cfg->n_ns);
	for (size_t i = 0; i < cfg->n_ns; i++)
		if (cfg->ns[i].sync_rate > 0)
			LOG(LOG_INFO, "namespace %s: %s store every %g s, admission %s",
			    cfg->ns[i].name, cfg->ns[i].strategy, cfg->ns[i].sync_rate,
			    ns_admission_names[ns_admission_of(&cfg->ns[i])]);
}

int main(int argc, char **argv)
{
	struct args a;
	struct config cfg;
	char err[256];
	int status;

	/* The operators' command line (docs/OPERATIONS.md). */
	if (argc > 1 && strcmp(argv[1], "ctl") == 0)
		return ctl_main(argc - 1, argv + 1);
	if ((status = parse_args(argc, argv, &a)) >= 0 || (status = load_config(&a, &cfg)) >= 0)
		return status;

	uint64_t seed;
	if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)rl_now();
	sync_set_node_seed(seed);

	struct rl *rl = open_library(&cfg, a.check_only, &status);
	if (!rl) {
		config_free(&cfg);
		return status;
	}
	warn_config(&cfg, rl);
	if (cfg.state_file[0] && !a.check_only)
		LOG(LOG_INFO, "state_file %s: %s", cfg.state_file,
		    rl_state_reused(rl) ? "counts of the last run kept" : "new");
	status = -1;
	uid_t uid;
	gid_t gid;
	if (master_owner_ids(cfg.listen_owner, &uid, &gid, err, sizeof(err)) < 0) {
		fprintf(stderr, "spoa-ratelimit: bad configuration: %s: %s\n",
			a.file ? a.file : "built-in", err);
		status = 2;
	} else if (a.check_only && check_listeners(&cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "spoa-ratelimit: bad configuration: %s: cannot listen: %s\n",
			a.file ? a.file : "built-in", err);
		status = 2;
	} else if (a.check_only) {
		printf("configuration OK: %zu namespace(s), listen %s, %d worker(s), max_keys %zu\n",
		       cfg.n_ns, cfg.listen, cfg.workers, cfg.max_keys);
		status = 0;
	}
	if (status >= 0) {
		rl_free(rl);
		config_free(&cfg);
		return status;
	}

	raise_nofile(&cfg);
	struct worker_listeners ls = { .master_pid = getpid() };
	if (open_listeners(&cfg, &ls, err, sizeof(err)) < 0) {
		fprintf(stderr, "spoa-ratelimit: cannot listen: %s\n", err);
		rl_free(rl);
		config_free(&cfg);
		return 1;
	}
	log_start(&cfg);
	if (reload_setup(a.file, a.verbose) < 0)
		LOG(LOG_WARN, "cannot map the reload area: SIGHUP will not reload");
	/* Heavy hitters (GET /top): without memory for them, the agent runs
	 * without (the endpoint says so). */
	ls.topk = topk_new(SHM_MAX_NS, SHM_MAX_WIN, cfg.top_keys, cfg.top_sample, err,
			   sizeof(err));
	if (!ls.topk && cfg.top_keys)
		LOG(LOG_WARN, "heavy hitters off: %s", err);
	int rc = master_run(&cfg, rl, &ls);
	topk_free(ls.topk);
	balance_free(ls.balance);
	metrics_free(ls.metrics);
	rl_free(rl);
	config_free(&cfg);
	return rc;
}
