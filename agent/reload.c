/*
 * reload.c - SIGHUP (see reload.h). The published text lives in a shared
 * mapping made before fork, guarded like a seqlock: the master makes the
 * generation odd, writes, makes it even; a worker copies and retries if
 * the generation moved meanwhile.
 */
#include "agent/reload.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/log.h"
#include "agent/ratelimit.h"
#include "agent/segment.h"

struct reload_area {
	_Atomic uint64_t gen;            /* even: stable; 0: nothing published */
	size_t len;
	char name[256];                  /* the file, for messages */
	char text[RELOAD_TEXT_MAX];
};

static struct reload_area *area;
static const char *reload_file;
static int reload_verbose;
static uint64_t applied;             /* the generation this process runs */

int reload_setup(const char *file, int verbose)
{
	void *p = segment_new(sizeof(*area));

	if (!p)
		return -1;
	area = p;
	reload_file = file;
	reload_verbose = verbose;
	return 0;
}

bool reload_pending(void)
{
	return area && atomic_load(&area->gen) / 2 != applied / 2;
}

/* Reads the file: its text (malloc'd) and length, or NULL with why. */
static char *reload_read(const char *file, size_t *len, char *why, size_t whylen)
{
	FILE *f = fopen(file, "r");
	char *buf;
	size_t n;

	if (!f) {
		snprintf(why, whylen, "%s: cannot open: %s", file, strerror(errno));
		return NULL;
	}
	buf = malloc(RELOAD_TEXT_MAX + 1);
	n = buf ? fread(buf, 1, RELOAD_TEXT_MAX + 1, f) : 0;
	if (!buf || ferror(f) || n > RELOAD_TEXT_MAX) {
		snprintf(why, whylen, "%s: %s", file,
			 !buf ? "out of memory" : ferror(f) ? "cannot read" : "over 256 KiB");
		fclose(f);
		free(buf);
		return NULL;
	}
	fclose(f);
	*len = n;
	return buf;
}

/* What cannot change in a running agent: logged when it differs. */
static void reload_report_kept(const struct config *cur, const struct config *next)
{
	static const char kept[] = "changed in the file: kept until the agent restarts";

	for (int f = 0; f < FRONT_COUNT; f++)
		if (strcmp(config_front_address(cur, (enum front_id)f),
			   config_front_address(next, (enum front_id)f)) != 0)
			LOG(LOG_WARN, "reload: %s %s", front_address_key((enum front_id)f), kept);
	if (cur->listen_mode != next->listen_mode || strcmp(cur->listen_owner, next->listen_owner))
		LOG(LOG_WARN, "reload: listen_mode / listen_owner %s", kept);
	if (cur->workers != next->workers)
		LOG(LOG_WARN, "reload: workers %s", kept);
	if (cur->max_keys != next->max_keys)
		LOG(LOG_WARN, "reload: max_keys %s", kept);
	if (cur->max_frame_size != next->max_frame_size)
		LOG(LOG_WARN, "reload: max_frame_size %s", kept);
	if (strcmp(cur->key_secret, next->key_secret) != 0)
		LOG(LOG_WARN, "reload: key_secret %s", kept);
	if (strcmp(cur->state_file, next->state_file) != 0)
		LOG(LOG_WARN, "reload: state_file %s", kept);
	/* As the workers apply them, behind HAProxy 2.x alone (bursts) or not. */
	for (int bursts = 0; bursts < 2; bursts++) {
		const char *peers = bursts ? "HAProxy 2.x alone" : "other peers";
		if (config_sched_batch(cur, bursts) != config_sched_batch(next, bursts))
			LOG(LOG_WARN, "reload: sched_batch (%s behind %s) %s",
			    config_sched_batch(cur, bursts) ? "on" : "off", peers, kept);
		if (config_collect_us(cur, bursts) != config_collect_us(next, bursts))
			LOG(LOG_WARN, "reload: collect_us (%u behind %s) %s",
			    config_collect_us(cur, bursts), peers, kept);
	}
}

/* Moves what may change live from next into cur; next gets cur's old
 * namespaces (for config_free). */
static void reload_live(struct config *cur, struct config *next)
{
	struct ns_def ns[NS_MAX];
	size_t n = cur->n_ns;

	cur->http_deny_status = next->http_deny_status;
	memcpy(cur->message_prefix, next->message_prefix, sizeof(cur->message_prefix));
	cur->var_scope = next->var_scope;
	cur->max_connections = next->max_connections;
	cur->idle_timeout_ms = next->idle_timeout_ms;
	cur->frame_timeout_ms = next->frame_timeout_ms;
	cur->max_buffer_memory = next->max_buffer_memory;
	cur->log_level = next->log_level;
	memcpy(ns, cur->ns, sizeof(ns));
	memcpy(cur->ns, next->ns, sizeof(ns));
	cur->n_ns = next->n_ns;
	memcpy(next->ns, ns, sizeof(ns));
	next->n_ns = n;
	log_level = cur->log_level + reload_verbose;
}

/* Parses text over the defaults and applies it to cfg and rl. Returns 0,
 * or -1 with why (nothing changed). */
static int reload_apply(struct config *cfg, struct rl *rl, const char *name, const char *text,
			size_t len, bool report, char *why, size_t whylen)
{
	struct config next;
	struct config_err err;
	char msg[256];

	config_defaults(&next);
	if (config_load_text(&next, name, text, len, &err) < 0) {
		config_err_format(&err, why, whylen);
		return -1;
	}
	/* The digest key of long keys is the shared table's: a reload that
	 * would make a random one public restarts every long key's count, in
	 * every namespace, and makes digests computable; keeping the random
	 * one would have each node name a long key of the syncing namespace
	 * its own way. Neither is a reload's to do (docs/CONFIG.md, "Long
	 * keys"). key_secret does not change live: the running one counts. */
	int pub = rl_reload_makes_key_public(rl, next.ns, next.n_ns);
	if (pub >= 0) {
		snprintf(why, whylen, "%s: namespaces[%d] (\"%s\") syncs with a store and no "
			 "key_secret is set: keys over %d bytes would be counted under the public "
			 "digest key instead of this run's random one, so their counts would "
			 "restart; set key_secret (the same on every node) and restart the agent, "
			 "or restart it to use the public key", name, pub,
			 next.ns[pub].name[0] ? next.ns[pub].name : "default", RL_STORED_KEY_MAX);
		config_free(&next);
		return -1;
	}
	if (report)
		reload_report_kept(cfg, &next);
	if (rl_reload(rl, next.ns, next.n_ns, msg, sizeof(msg)) < 0) {
		snprintf(why, whylen, "%s: %s", name, msg);
		config_free(&next);
		return -1;
	}
	reload_live(cfg, &next);
	config_free(&next);
	return 0;
}

int reload_master(struct config *cfg, struct rl *rl)
{
	char why[1024];
	size_t len = 0;
	char *text;

	if (!reload_file || !area) {
		LOG(LOG_INFO, "SIGHUP: no configuration file (-c): nothing to reload");
		return 0;
	}
	if (!(text = reload_read(reload_file, &len, why, sizeof(why))) ||
	    reload_apply(cfg, rl, reload_file, text, len, true, why, sizeof(why)) < 0) {
		LOG(LOG_ERR, "reload refused: %s; the running configuration is kept", why);
		free(text);
		return 0;
	}
	uint64_t g = atomic_load(&area->gen);
	atomic_store(&area->gen, g + 1);
	snprintf(area->name, sizeof(area->name), "%s", reload_file);
	memcpy(area->text, text, len);
	area->len = len;
	atomic_store(&area->gen, g + 2);
	applied = g + 2;
	free(text);
	LOG(LOG_INFO, "reloaded %s: %zu namespace(s); telling the workers", reload_file, cfg->n_ns);
	return 1;
}

int reload_worker(struct config *cfg, struct rl *rl)
{
	char why[1024];
	char *text = malloc(RELOAD_TEXT_MAX);
	char name[sizeof(area->name)];
	uint64_t g;
	size_t len;

	if (!text)
		return -1;
	for (int tries = 0;; tries++) {
		if (tries == 1000000) {
			/* The master died while writing: it takes us with it. */
			free(text);
			return -1;
		}
		g = atomic_load(&area->gen);
		if (g % 2 == 0) {
			len = area->len;
			memcpy(text, area->text, len);
			memcpy(name, area->name, sizeof(name));
			if (atomic_load(&area->gen) == g)
				break;
		}
	}
	if (g == applied) {
		free(text);
		return 0;
	}
	if (reload_apply(cfg, rl, name, text, len, false, why, sizeof(why)) < 0) {
		LOG(LOG_ERR, "reload failed in this worker: %s; it keeps its configuration", why);
		free(text);
		return -1;
	}
	applied = g;
	free(text);
	LOG(LOG_DEBUG, "reloaded: %zu namespace(s)", cfg->n_ns);
	return 1;
}
