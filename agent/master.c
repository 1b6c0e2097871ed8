/*
 * master.c - listener, worker processes and signals (see master.h). The
 * master runs no event loop: it waits for signals with sigtimedwait().
 */
#include "agent/master.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <netdb.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/balance.h"
#include "agent/config.h"
#include "agent/log.h"
#include "agent/ratelimit.h"
#include "agent/reload.h"
#include "agent/sync.h"
#include "agent/worker.h"

#define MASTER_STOP_SECONDS   10     /* then SIGKILL what is left */
#define MASTER_RESPAWN_DELAY  1.0    /* for a worker that died within 1 s */
#define MASTER_MAX_WORKERS    64
#define MASTER_FLUSH_SECONDS  3.0    /* bound on the final push to the stores */

struct master_worker {
	pid_t pid;              /* 0 when not running */
	double started;
	double respawn_at;      /* when to start it again, 0 = not pending */
};

static double mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The unix socket this process bound (st_dev, st_ino), 0 if none. */
static struct master_sock {
	dev_t dev;
	ino_t ino;
} master_socks[2];

/* Removes the unix socket of addr if it is still the one we bound (not a
 * file that replaced it since). */
static void master_unlink_own(const char *addr)
{
	const char *path = config_unix_path(addr);
	struct stat st;

	if (!path)
		return;
	if (lstat(path, &st) < 0)
		return;
	for (size_t i = 0; i < sizeof(master_socks) / sizeof(master_socks[0]); i++) {
		struct master_sock *ms = &master_socks[i];
		if (ms->ino != 0 && st.st_dev == ms->dev && st.st_ino == ms->ino) {
			unlink(path);
			ms->ino = 0;
			return;
		}
	}
}

/* A user or group id from a decimal number or a name; -1 if unknown. */
static long long master_id(const char *s, bool group)
{
	char *end;
	unsigned long long x;

	if (s[0] >= '0' && s[0] <= '9') {
		errno = 0;
		x = strtoull(s, &end, 10);
		return errno == 0 && *end == '\0' && x < UINT_MAX ? (long long)x : -1;
	}
	if (group) {
		struct group *g = getgrnam(s);
		return g ? (long long)g->gr_gid : -1;
	}
	struct passwd *pw = getpwnam(s);
	return pw ? (long long)pw->pw_uid : -1;
}

int master_owner_ids(const char *owner, uid_t *uid, gid_t *gid, char *err, size_t errlen)
{
	char buf[CONFIG_OWNER_MAX], *colon;
	long long u = -1, g = -1;

	*uid = (uid_t)-1;
	*gid = (gid_t)-1;
	if (!owner[0])
		return 0;
	snprintf(buf, sizeof(buf), "%s", owner);
	colon = strchr(buf, ':');
	if (colon)
		*colon = '\0';
	if (buf[0] && (u = master_id(buf, false)) < 0) {
		snprintf(err, errlen, "listen_owner \"%s\": no user \"%s\"", owner, buf);
		return -1;
	}
	if (colon && (g = master_id(colon + 1, true)) < 0) {
		snprintf(err, errlen, "listen_owner \"%s\": no group \"%s\"", owner, colon + 1);
		return -1;
	}
	*uid = (uid_t)u;
	*gid = (gid_t)g;
	return 0;
}

/* An existing socket file at sun: may it be replaced? Only if a connect
 * says nobody listens on it (ECONNREFUSED): the file is then removed. A
 * connect that succeeds finds a live agent; any other failure (EACCES on
 * a 0600 socket of another user, EAGAIN with its backlog full, ...) says
 * nothing about whether it is alive: the file is left alone and the start
 * refused, naming the path and the error. The probe does not block (a
 * full backlog would hold a blocking connect). 0: go on and bind; -1 with
 * err. */
static int master_probe_unix(const char *addr, const struct sockaddr_un *sun, char *err,
			     size_t errlen)
{
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int rc, e;

	if (probe < 0) {
		snprintf(err, errlen, "%s: socket: %s", addr, strerror(errno));
		return -1;
	}
	rc = connect(probe, (const struct sockaddr *)sun, sizeof(*sun));
	e = errno;
	close(probe);
	if (rc == 0) {
		snprintf(err, errlen, "%s: another process is listening on this "
			 "socket (another agent?); not replacing it", addr);
		return -1;
	}
	if (e == ECONNREFUSED) {
		/* Stale: nobody listens. */
		if (unlink(sun->sun_path) < 0 && errno != ENOENT) {
			snprintf(err, errlen, "%s: stale socket file: unlink: %s", addr,
				 strerror(errno));
			return -1;
		}
		return 0;
	}
	if (e == ENOENT)
		return 0;        /* removed since lstat(): nothing to replace */
	snprintf(err, errlen, "%s: exists, and connecting to it to see whether a process "
		 "listens failed: %s; not replacing it", addr, strerror(e));
	return -1;
}

/* Binds and listens on the unix socket of cfg->listen with cfg's owner and
 * mode. The file is created with no access for group and others, then
 * chowned, then given its mode, so no peer can connect in between with
 * more rights than asked for. */
static int master_listen_unix(const struct config *cfg, const char *addr, const char *path,
			      char *err, size_t errlen)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	uid_t uid;
	gid_t gid;
	struct stat st;
	int fd, rc;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		snprintf(err, errlen, "%s: unix socket path too long", addr);
		return -1;
	}
	if (master_owner_ids(cfg->listen_owner, &uid, &gid, err, errlen) < 0)
		return -1;
	strcpy(sun.sun_path, path);
	/* A socket file left by a previous run is replaced; one that a live
	 * process listens on is not (a second agent on the same path refuses
	 * to start), nor is anything but a socket. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s: exists and is not a socket", addr);
			return -1;
		}
		if (master_probe_unix(addr, &sun, err, errlen) < 0)
			return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "%s: socket: %s", addr, strerror(errno));
		return -1;
	}
	bool restrict_first = cfg->listen_mode >= 0 || cfg->listen_owner[0];
	mode_t old_mask = restrict_first ? umask(0077) : 0;
	rc = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
	if (restrict_first)
		umask(old_mask);
	if (rc < 0) {
		snprintf(err, errlen, "%s: bind: %s", addr, strerror(errno));
		close(fd);
		return -1;
	}
	/* Remember which file is ours: at exit only it is removed. */
	if (stat(path, &st) == 0) {
		struct master_sock *ms = &master_socks[master_socks[0].ino != 0];
		ms->dev = st.st_dev;
		ms->ino = st.st_ino;
	}
	const char *what = NULL;
	if (cfg->listen_owner[0] && chown(path, uid, gid) < 0)
		what = "listen_owner";
	else if (cfg->listen_mode >= 0 && chmod(path, (mode_t)cfg->listen_mode) < 0)
		what = "listen_mode";
	else if (listen(fd, 1024) < 0)
		what = "listen";
	if (what) {
		snprintf(err, errlen, "%s: %s: %s", addr, what, strerror(errno));
		close(fd);
		master_unlink_own(addr);
		return -1;
	}
	return fd;
}

/* The address of a TCP listen address ("HOST:PORT", "[IPV6]:PORT", "*:PORT",
 * ":PORT"): 0 with *res (freeaddrinfo), or -1 with err set. */
static int master_resolve(const char *addr, struct addrinfo **res, char *err, size_t errlen)
{
	char host[CONFIG_ADDR_MAX], *port;
	snprintf(host, sizeof(host), "%s", addr);
	char *h = host;
	if (h[0] == '[') {
		char *close_br = strchr(h, ']');
		if (!close_br || close_br[1] != ':') {
			snprintf(err, errlen, "%s: expected [IPV6]:PORT", addr);
			return -1;
		}
		*close_br = '\0';
		h++;
		port = close_br + 2;
	} else {
		port = strrchr(h, ':');
		if (!port) {
			snprintf(err, errlen, "%s: expected HOST:PORT", addr);
			return -1;
		}
		*port++ = '\0';
	}
	if (h[0] == '\0' || strcmp(h, "*") == 0)
		h = NULL;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	int rc = getaddrinfo(h, port, &hints, res);
	if (rc != 0) {
		snprintf(err, errlen, "%s: %s", addr, gai_strerror(rc));
		return -1;
	}
	return 0;
}

int master_check_listen(const char *addr, char *err, size_t errlen)
{
	struct addrinfo *res;

	if (config_unix_path(addr))
		return 0;
	if (master_resolve(addr, &res, err, errlen) < 0)
		return -1;
	freeaddrinfo(res);
	return 0;
}

int master_listen(const struct config *cfg, const char *addr, char *err, size_t errlen)
{
	const char *path = config_unix_path(addr);
	struct addrinfo *res;
	int fd;

	if (path)
		return master_listen_unix(cfg, addr, path, err, errlen);
	if (master_resolve(addr, &res, err, errlen) < 0)
		return -1;
	fd = socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		freeaddrinfo(res);
		goto fail;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
		int e = errno;
		freeaddrinfo(res);
		close(fd);
		errno = e;
		goto fail;
	}
	freeaddrinfo(res);
	return fd;
fail:
	snprintf(err, errlen, "%s: %s", addr, strerror(errno));
	return -1;
}

static pid_t master_spawn(struct config *cfg, struct rl *rl,
			  const struct worker_listeners *ls, int id)
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(worker_run(cfg, rl, ls, id));
	if (pid < 0)
		LOG(LOG_ERR, "fork: %s", strerror(errno));
	return pid;
}

/* Reaps exited workers (their share of the connections goes with them,
 * agent/balance.h, and what they left half done in the table: rl_worker_gone);
 * schedules a respawn unless stopping. Returns how many
 * are still running. */
static int master_reap(struct master_worker *ws, int n, bool stopping, struct balance *bal,
		       struct rl *rl)
{
	int status, running = 0;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (int i = 0; i < n; i++) {
			if (ws[i].pid != pid)
				continue;
			ws[i].pid = 0;
			balance_gone(bal, i);
			if (stopping)
				break;
			rl_worker_gone(rl);
			if (WIFSIGNALED(status))
				LOG(LOG_WARN, "worker %d (pid %d) killed by signal %d, respawning", i,
				    (int)pid, WTERMSIG(status));
			else
				LOG(LOG_WARN, "worker %d (pid %d) exited with status %d, respawning", i,
				    (int)pid, WEXITSTATUS(status));
			double now = mono_now();
			/* A worker that dies at once would otherwise spin. */
			ws[i].respawn_at = now - ws[i].started < 1.0 ? now + MASTER_RESPAWN_DELAY : now;
			break;
		}
	}
	for (int i = 0; i < n; i++)
		running += ws[i].pid > 0;
	return running;
}

int master_run(struct config *cfg, struct rl *rl, const struct worker_listeners *ls)
{
	struct master_worker ws[MASTER_MAX_WORKERS];
	int n = cfg->workers < MASTER_MAX_WORKERS ? cfg->workers : MASTER_MAX_WORKERS;
	sigset_t set;

	memset(ws, 0, sizeof(ws));
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);

	for (int i = 0; i < n; i++) {
		ws[i].started = mono_now();
		ws[i].pid = master_spawn(cfg, rl, ls, i);
		if (ws[i].pid < 0)
			return 1;
	}

	for (;;) {
		struct timespec tick = { .tv_sec = 0, .tv_nsec = 200 * 1000 * 1000 };
		int sig = sigtimedwait(&set, NULL, &tick);
		if (sig == SIGTERM || sig == SIGINT)
			break;
		if (sig == SIGHUP && reload_master(cfg, rl))
			for (int i = 0; i < n; i++)
				if (ws[i].pid > 0)
					kill(ws[i].pid, SIGHUP);
		if (sig == SIGCHLD)
			master_reap(ws, n, false, ls->balance, rl);
		double now = mono_now();
		for (int i = 0; i < n; i++) {
			if (ws[i].pid == 0 && ws[i].respawn_at > 0 && now >= ws[i].respawn_at) {
				ws[i].respawn_at = 0;
				ws[i].started = now;
				pid_t pid = master_spawn(cfg, rl, ls, i);
				ws[i].pid = pid > 0 ? pid : 0;
				if (pid < 0)
					ws[i].respawn_at = now + MASTER_RESPAWN_DELAY;
			}
		}
	}

	LOG(LOG_INFO, "stopping: workers finish their frames");
	for (int f = 0; f < FRONT_COUNT; f++)
		if (ls->fd[f] >= 0) {
			close(ls->fd[f]);
			master_unlink_own(config_front_address(cfg, (enum front_id)f));
		}
	for (int i = 0; i < n; i++)
		if (ws[i].pid > 0)
			kill(ws[i].pid, SIGTERM);
	double deadline = mono_now() + MASTER_STOP_SECONDS;
	while (master_reap(ws, n, true, ls->balance, rl) > 0) {
		if (mono_now() >= deadline) {
			LOG(LOG_WARN, "workers still running after %d s: killing them",
			    MASTER_STOP_SECONDS);
			for (int i = 0; i < n; i++)
				if (ws[i].pid > 0)
					kill(ws[i].pid, SIGKILL);
			deadline = mono_now() + MASTER_STOP_SECONDS;
		}
		struct timespec tick = { .tv_sec = 0, .tv_nsec = 100 * 1000 * 1000 };
		sigtimedwait(&set, NULL, &tick);
	}
	/* The workers are gone: push what they counted since the last cycle. */
	size_t left = sync_flush(rl, MASTER_FLUSH_SECONDS);
	if (left)
		LOG(LOG_WARN, "%zu counter(s) could not be pushed to their store before exit", left);
	LOG(LOG_INFO, "stopped");
	return 0;
}
