/*
 * redis_server.c - a real redis-server as a test fixture. See
 * redis_server.h for the contract.
 */
#include "tests/lib/redis_server.h"
#include "tests/lib/clock.h"
#include "tests/lib/port.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REDIS_SERVER_BIN "redis-server"
#define REDIS_SERVER_PORT_TRIES 8

bool redis_server_available(void)
{
	return redis_server_have(REDIS_SERVER_BIN);
}

bool redis_server_have(const char *bin)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	if (path == NULL)
		path = "/usr/bin:/bin";
	while (*path) {
		const char *end = strchr(path, ':');
		size_t len = end ? (size_t)(end - path) : strlen(path);

		if (len && snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, path, bin) <
				   (int)sizeof(buf) &&
		    access(buf, X_OK) == 0)
			return true;
		path += len + (end ? 1 : 0);
	}
	return false;
}

/* A port the kernel just handed out on 127.0.0.1 (free a moment ago);
 * with cluster_bus one below 55535 whose cluster bus port (+10000) is
 * free too. */
static int redis_server_free_port(bool cluster_bus)
{
	for (int tries = 0; tries < 200; tries++) {
		int port = test_port(0);

		if (port < 0 || !cluster_bus)
			return port;
		if (port >= 55535) {
			/* the kernel's range is above: pick one below ourselves */
			unsigned r = (unsigned)getpid() * 2654435761u + (unsigned)tries * 7919u;

			port = test_port(20000 + (int)(r % 30000));
			if (port < 0)
				continue;
		}
		if (test_port(port + 10000) == port + 10000)
			return port;
	}
	return -1;
}

/* Reaps the child if it exited; true if it is gone. */
static bool redis_server_reap(struct redis_server *r, int *status)
{
	pid_t p;

	if (r->pid <= 0)
		return true;
	p = waitpid(r->pid, status, WNOHANG);
	if (p == r->pid || (p < 0 && errno == ECHILD)) {
		r->pid = 0;
		r->paused = false;
		return true;
	}
	return false;
}

static bool redis_server_pings(struct redis_server *r)
{
	redisReply *rep = redis_server_command(r, "PING");
	bool ok = rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;

	if (rep)
		freeReplyObject(rep);
	return ok;
}

/* Forks and execs redis-server on r->port; waits for PING. Returns 0, -1
 * (failed; r->err), or 1 (exited early: maybe the port was taken). */
static int redis_server_spawn(struct redis_server *r, int timeout_ms)
{
	char port[16];
	const char *argv[32 + REDIS_SERVER_MAX_ARGS];
	int argc = 0, status = 0;
	long long deadline;
	pid_t pid;

	snprintf(port, sizeof(port), "%d", r->port);
	argv[argc++] = r->bin ? r->bin : REDIS_SERVER_BIN;
	if (r->conf[0])
		argv[argc++] = r->conf;
	argv[argc++] = "--port";
	argv[argc++] = port;
	argv[argc++] = "--bind";
	argv[argc++] = "127.0.0.1";
	argv[argc++] = "--save";
	argv[argc++] = "";
	argv[argc++] = "--appendonly";
	argv[argc++] = "no";
	argv[argc++] = "--daemonize";
	argv[argc++] = "no";
	argv[argc++] = "--dir";
	argv[argc++] = r->dir;
	argv[argc++] = "--logfile";
	argv[argc++] = "";
	for (int i = 0; i < REDIS_SERVER_MAX_ARGS && r->extra[i]; i++)
		argv[argc++] = r->extra[i];
	argv[argc] = NULL;

	pid = fork();
	if (pid < 0) {
		snprintf(r->err, sizeof(r->err), "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		int fd = open(r->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
		int null = open("/dev/null", O_RDONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (null >= 0)
			dup2(null, 0);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	r->pid = pid;
	r->paused = false;
	deadline = test_now_ms() + timeout_ms;
	while (test_now_ms() < deadline) {
		if (redis_server_reap(r, &status)) {
			snprintf(r->err, sizeof(r->err),
				 "redis-server exited early (status %d, log %s)", status,
				 r->log_path);
			return 1;
		}
		if (redis_server_pings(r))
			return 0;
		test_sleep_ms(10);
	}
	snprintf(r->err, sizeof(r->err), "redis-server did not answer PING within %d ms",
		 timeout_ms);
	kill(r->pid, SIGKILL);
	waitpid(r->pid, NULL, 0);
	r->pid = 0;
	return -1;
}

int redis_server_start(struct redis_server *r, int timeout_ms)
{
	r->pid = 0;
	r->paused = false;
	snprintf(r->dir, sizeof(r->dir), "/tmp/redis_server.XXXXXX");
	if (mkdtemp(r->dir) == NULL) {
		snprintf(r->err, sizeof(r->err), "mkdtemp: %s", strerror(errno));
		r->dir[0] = '\0';
		return -1;
	}
	snprintf(r->log_path, sizeof(r->log_path), "%s/redis.log", r->dir);
	r->conf[0] = '\0';
	if (r->conf_text) {
		FILE *f;

		snprintf(r->conf, sizeof(r->conf), "%s/server.conf", r->dir);
		f = fopen(r->conf, "w");
		if (f == NULL || fputs(r->conf_text, f) < 0) {
			snprintf(r->err, sizeof(r->err), "%s: %s", r->conf, strerror(errno));
			if (f)
				fclose(f);
			redis_server_stop(r, 0);
			return -1;
		}
		fclose(f);
	}
	for (int tries = 0; tries < REDIS_SERVER_PORT_TRIES; tries++) {
		int rc;

		r->port = redis_server_free_port(r->cluster_bus);
		if (r->port < 0) {
			snprintf(r->err, sizeof(r->err), "no free port: %s", strerror(errno));
			break;
		}
		rc = redis_server_spawn(r, timeout_ms);
		if (rc == 0)
			return 0;
		if (rc < 0)
			break;
	}
	redis_server_stop(r, 0);
	return -1;
}

int redis_server_restart(struct redis_server *r, int timeout_ms)
{
	long long deadline = test_now_ms() + timeout_ms;

	if (r->pid > 0) {
		snprintf(r->err, sizeof(r->err), "still running");
		return -1;
	}
	/* the old socket may linger a moment; retry on the same port */
	for (;;) {
		int left = (int)(deadline - test_now_ms());
		int rc = redis_server_spawn(r, left > 0 ? left : 1);

		if (rc <= 0)
			return rc;
		if (test_now_ms() >= deadline)
			return -1;
		test_sleep_ms(20);
	}
}

int redis_server_pause(struct redis_server *r)
{
	if (r->pid <= 0 || kill(r->pid, SIGSTOP) < 0)
		return -1;
	r->paused = true;
	return 0;
}

int redis_server_resume(struct redis_server *r)
{
	if (r->pid <= 0 || kill(r->pid, SIGCONT) < 0)
		return -1;
	r->paused = false;
	return 0;
}

int redis_server_kill(struct redis_server *r)
{
	if (r->pid <= 0)
		return -1;
	kill(r->pid, SIGKILL);
	waitpid(r->pid, NULL, 0);
	r->pid = 0;
	r->paused = false;
	return 0;
}

static int redis_server_rm_entry(const char *path, const struct stat *sb, int flag,
				 struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

/* Removes the directory and everything in it (Redis 7 keeps its AOF in a
 * subdirectory when appendonly is on). */
static void redis_server_rmdir(const char *dir)
{
	nftw(dir, redis_server_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

void redis_server_stop(struct redis_server *r, int timeout_ms)
{
	if (r->pid > 0) {
		long long deadline = test_now_ms() + timeout_ms;

		kill(r->pid, SIGTERM);
		if (r->paused)
			kill(r->pid, SIGCONT);
		while (!redis_server_reap(r, NULL) && test_now_ms() < deadline)
			test_sleep_ms(5);
		if (r->pid > 0) {
			kill(r->pid, SIGKILL);
			waitpid(r->pid, NULL, 0);
			r->pid = 0;
		}
	}
	r->paused = false;
	if (r->dir[0]) {
		redis_server_rmdir(r->dir);
		r->dir[0] = '\0';
	}
}

/* A blocking connection with a timeout, authenticated if needed. */
redisContext *redis_server_connect(struct redis_server *r)
{
	struct timeval tv = { .tv_sec = 2, .tv_usec = 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);

	if (c == NULL || c->err) {
		snprintf(r->err, sizeof(r->err), "connect: %s", c ? c->errstr : "out of memory");
		if (c)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	if (r->password[0]) {
		redisReply *rep = redisCommand(c, "AUTH %s", r->password);

		if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
			snprintf(r->err, sizeof(r->err), "AUTH: %s",
				 rep ? rep->str : c->errstr);
			if (rep)
				freeReplyObject(rep);
			redisFree(c);
			return NULL;
		}
		freeReplyObject(rep);
	}
	return c;
}

static redisReply *redis_server_vcommand(struct redis_server *r, const char *fmt, va_list ap)
{
	redisContext *c = redis_server_connect(r);
	redisReply *rep;

	if (c == NULL)
		return NULL;
	rep = redisvCommand(c, fmt, ap);
	if (rep == NULL)
		snprintf(r->err, sizeof(r->err), "command: %s", c->errstr);
	redisFree(c);
	return rep;
}

redisReply *redis_server_command(struct redis_server *r, const char *fmt, ...)
{
	va_list ap;
	redisReply *rep;

	va_start(ap, fmt);
	rep = redis_server_vcommand(r, fmt, ap);
	va_end(ap);
	return rep;
}

redisReply *redis_server_commandargv(struct redis_server *r, int argc, const char **argv,
				     const size_t *argvlen)
{
	redisContext *c = redis_server_connect(r);
	redisReply *rep;

	if (c == NULL)
		return NULL;
	rep = redisCommandArgv(c, argc, argv, argvlen);
	if (rep == NULL)
		snprintf(r->err, sizeof(r->err), "command: %s", c->errstr);
	redisFree(c);
	return rep;
}

long long redis_server_integer(struct redis_server *r, const char *fmt, ...)
{
	va_list ap;
	redisReply *rep;
	long long v = LLONG_MIN;

	va_start(ap, fmt);
	rep = redis_server_vcommand(r, fmt, ap);
	va_end(ap);
	if (rep && rep->type == REDIS_REPLY_INTEGER)
		v = rep->integer;
	else if (rep)
		snprintf(r->err, sizeof(r->err), "not an integer reply (type %d: %s)", rep->type,
			 rep->str ? rep->str : "");
	if (rep)
		freeReplyObject(rep);
	return v;
}

double redis_server_hget(struct redis_server *r, const char *hash, size_t hlen,
			 const char *field, size_t flen)
{
	redisReply *rep = redis_server_command(r, "HGET %b %b", hash, hlen, field, flen);
	double v = NAN;

	if (rep && rep->type == REDIS_REPLY_STRING)
		v = strtod(rep->str, NULL);
	else if (rep && rep->type == REDIS_REPLY_NIL)
		v = 0;
	if (rep)
		freeReplyObject(rep);
	return v;
}

unsigned redis_server_bucket(const char *key, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)key[i];
		h *= 0x100000001b3ULL;
	}
	return (unsigned)(h % 64);
}

long redis_server_count_keys(struct redis_server *r, const char *pattern)
{
	redisContext *c = redis_server_connect(r);
	char cursor[32] = "0";
	long n = 0;

	if (c == NULL)
		return -1;
	do {
		redisReply *rep = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);

		if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
		    rep->element[0]->type != REDIS_REPLY_STRING ||
		    rep->element[1]->type != REDIS_REPLY_ARRAY) {
			snprintf(r->err, sizeof(r->err), "SCAN failed");
			if (rep)
				freeReplyObject(rep);
			redisFree(c);
			return -1;
		}
		snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
		n += (long)rep->element[1]->elements;
		freeReplyObject(rep);
	} while (strcmp(cursor, "0") != 0);
	redisFree(c);
	return n;
}
