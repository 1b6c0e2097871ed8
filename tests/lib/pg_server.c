/*
 * pg_server.c - a real PostgreSQL for tests (see pg_server.h). Processes
 * are only ever signalled by pid: the postmaster we forked, and the
 * children /proc says it has.
 */
#include "tests/lib/pg_server.h"
#include "tests/lib/clock.h"
#include "tests/lib/port.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
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

#define PG_SERVER_USER "postgres"

const char *pg_server_bindir(void)
{
	const char *env = getenv("PG_BINDIR");

	return env && *env ? env : "/usr/lib/postgresql/15/bin";
}

/* Fills uid/gid/drop: the postgres user under root, else ourselves. */
static int pg_server_user(struct pg_server *p)
{
	struct passwd *pw;

	if (geteuid() != 0) {
		p->uid = geteuid();
		p->gid = getegid();
		p->drop = false;
		return 0;
	}
	pw = getpwnam(PG_SERVER_USER);
	if (!pw) {
		snprintf(p->err, sizeof(p->err),
			 "running as root and there is no \"%s\" user to run initdb as",
			 PG_SERVER_USER);
		return -1;
	}
	p->uid = pw->pw_uid;
	p->gid = pw->pw_gid;
	p->drop = true;
	return 0;
}

bool pg_server_available(void)
{
	char path[PG_SERVER_PATH_MAX];

	snprintf(path, sizeof(path), "%s/initdb", pg_server_bindir());
	if (access(path, X_OK) != 0)
		return false;
	snprintf(path, sizeof(path), "%s/postgres", pg_server_bindir());
	if (access(path, X_OK) != 0)
		return false;
	return geteuid() != 0 || getpwnam(PG_SERVER_USER) != NULL;
}

/* Forks argv[0] with stdout/stderr appended to the log, as p's user.
 * postmaster: the child is killed if we die. Returns the pid or -1. */
static pid_t pg_server_spawn(struct pg_server *p, char *const argv[], bool postmaster)
{
	pid_t parent = getpid(), pid;
	int log = open(p->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

	if (log < 0) {
		snprintf(p->err, sizeof(p->err), "open %s: %s", p->log_path, strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		snprintf(p->err, sizeof(p->err), "fork: %s", strerror(errno));
		close(log);
		return -1;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);

		if (null >= 0)
			dup2(null, 0);
		dup2(log, 1);
		dup2(log, 2);
		setsid();
		if (p->drop && (setgroups(0, NULL) != 0 || setgid(p->gid) != 0 ||
				setuid(p->uid) != 0))
			_exit(126);
		/* After setuid: a change of credentials clears it. */
		if (postmaster) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent)
				_exit(125);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	close(log);
	return pid;
}

/* Runs argv to completion (up to timeout_ms). Returns 0 if it exited 0. */
static int pg_server_run(struct pg_server *p, char *const argv[], int timeout_ms)
{
	int64_t deadline = test_now_ms() + timeout_ms;
	pid_t pid = pg_server_spawn(p, argv, false);
	int st;

	if (pid < 0)
		return -1;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			snprintf(p->err, sizeof(p->err), "waitpid: %s", strerror(errno));
			return -1;
		}
		if (test_now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			snprintf(p->err, sizeof(p->err), "%s: timed out (log: %s)", argv[0],
				 p->log_path);
			return -1;
		}
		test_sleep_ms(10);
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		snprintf(p->err, sizeof(p->err), "%s failed (status %d, log: %s)", argv[0], st,
			 p->log_path);
		return -1;
	}
	return 0;
}

int pg_server_create(struct pg_server *p, const char *template_data)
{
	char bin[PG_SERVER_PATH_MAX + 16];

	memset(p, 0, sizeof(*p));
	if (pg_server_user(p) < 0)
		return -1;
	snprintf(p->dir, sizeof(p->dir), "/tmp/pgsrv-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(p->dir)) {
		snprintf(p->err, sizeof(p->err), "mkdtemp: %s", strerror(errno));
		p->dir[0] = '\0';
		return -1;
	}
	if (p->drop && chown(p->dir, p->uid, p->gid) != 0) {
		snprintf(p->err, sizeof(p->err), "chown %s: %s", p->dir, strerror(errno));
		return -1;
	}
	snprintf(p->data, sizeof(p->data), "%.200s/data", p->dir);
	snprintf(p->log_path, sizeof(p->log_path), "%.200s/log", p->dir);
	if (template_data) {
		char *argv[] = { "/bin/cp", "-a", (char *)template_data, p->data, NULL };

		return pg_server_run(p, argv, 30000);
	}
	snprintf(bin, sizeof(bin), "%s/initdb", pg_server_bindir());
	{
		char *argv[] = { bin,        "-D",       p->data,          "-U",
				 "postgres", "-A",       "trust",          "-E",
				 "UTF8",     "--locale", "C",              "--no-sync",
				 NULL };

		return pg_server_run(p, argv, 60000);
	}
}

int pg_server_start_shared(struct pg_server *tpl, struct pg_server *srv, const char *who)
{
	if (!pg_server_available()) {
		fprintf(stderr, "%s: PostgreSQL not found in %s\n", who, pg_server_bindir());
		return -1;
	}
	if (pg_server_create(tpl, NULL) < 0) {
		fprintf(stderr, "%s: initdb: %s\n", who, tpl->err);
		return -1;
	}
	if (pg_server_create(srv, tpl->data) < 0 || pg_server_start(srv, 30000) < 0) {
		fprintf(stderr, "%s: server: %s\n", who, srv->err);
		return -1;
	}
	return 0;
}

/* One attempt on p->port. Returns 0, -1 (failed), -2 (exited early: maybe
 * the port was taken). */
static int pg_server_try_start(struct pg_server *p, int timeout_ms)
{
	char bin[PG_SERVER_PATH_MAX + 16], port[16], ping[PG_SERVER_PATH_MAX + 32];
	char *argv[32] = { bin,
			   "-D", p->data,
			   "-p", port,
			   "-k", p->dir,
			   "-c", "listen_addresses=127.0.0.1",
			   "-c", "max_connections=60",
			   "-c", "logging_collector=off",
			   "-c", p->durable ? "fsync=on" : "fsync=off",
			   "-c", p->durable ? "synchronous_commit=on" : "synchronous_commit=off",
			   "-c", p->durable ? "full_page_writes=on" : "full_page_writes=off",
			   NULL };
	int64_t deadline = test_now_ms() + timeout_ms;
	size_t na = 19;
	int st;

	for (size_t i = 0; i < sizeof(p->extra) / sizeof(p->extra[0]) && p->extra[i]; i++)
		argv[na++] = (char *)p->extra[i];
	argv[na] = NULL;

	snprintf(bin, sizeof(bin), "%s/postgres", pg_server_bindir());
	snprintf(port, sizeof(port), "%d", p->port);
	snprintf(p->conninfo, sizeof(p->conninfo),
		 "host=127.0.0.1 port=%d dbname=postgres user=postgres", p->port);
	snprintf(ping, sizeof(ping), "%s connect_timeout=2", p->conninfo);
	p->pid = pg_server_spawn(p, argv, true);
	if (p->pid < 0) {
		p->pid = 0;
		return -1;
	}
	for (;;) {
		if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
			snprintf(p->err, sizeof(p->err), "postgres exited (status %d, log: %s)", st,
				 p->log_path);
			p->pid = 0;
			return -2;
		}
		if (PQping(ping) == PQPING_OK)
			return 0;
		if (test_now_ms() > deadline)
			break;
		test_sleep_ms(20);
	}
	snprintf(p->err, sizeof(p->err), "postgres not accepting connections after %d ms (log: %s)",
		 timeout_ms, p->log_path);
	kill(p->pid, SIGKILL);
	waitpid(p->pid, &st, 0);
	p->pid = 0;
	return -1;
}

int pg_server_start(struct pg_server *p, int timeout_ms)
{
	if (p->pid) {
		snprintf(p->err, sizeof(p->err), "already running");
		return -1;
	}
	for (int attempt = 0; attempt < 5; attempt++) {
		int r;

		if (!p->fixed_port) {
			p->port = test_port(0);
			if (p->port < 0) {
				snprintf(p->err, sizeof(p->err), "no free port");
				return -1;
			}
		}
		r = pg_server_try_start(p, timeout_ms);
		if (r == 0) {
			p->fixed_port = true;
			p->paused = false;
			return 0;
		}
		if (r == -1)
			return -1;
		if (p->fixed_port)
			test_sleep_ms(100); /* same port: let the old one go */
	}
	return -1;
}

/* Direct children of pid, from /proc/<n>/stat. Returns the count. */
static size_t pg_server_children(pid_t pid, pid_t *out, size_t max)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	size_t n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)) && n < max) {
		char path[64], buf[512], *rp;
		long ppid;
		FILE *f;
		size_t len;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%.20s/stat", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = '\0';
		rp = strrchr(buf, ')'); /* comm may hold spaces */
		if (!rp || sscanf(rp + 1, " %*c %ld", &ppid) != 1)
			continue;
		if (ppid == pid)
			out[n++] = (pid_t)atol(de->d_name);
	}
	closedir(d);
	return n;
}

static int pg_server_signal_all(struct pg_server *p, int sig)
{
	pid_t kids[256];
	size_t n;

	if (!p->pid)
		return -1;
	if (sig == SIGSTOP && kill(p->pid, sig) != 0)
		return -1;
	n = pg_server_children(p->pid, kids, sizeof(kids) / sizeof(kids[0]));
	for (size_t i = 0; i < n; i++)
		kill(kids[i], sig);
	if (sig != SIGSTOP && kill(p->pid, sig) != 0)
		return -1;
	return 0;
}

int pg_server_pause(struct pg_server *p)
{
	if (pg_server_signal_all(p, SIGSTOP) < 0)
		return -1;
	p->paused = true;
	return 0;
}

int pg_server_resume(struct pg_server *p)
{
	if (pg_server_signal_all(p, SIGCONT) < 0)
		return -1;
	p->paused = false;
	return 0;
}

int pg_server_stop(struct pg_server *p, int timeout_ms)
{
	int64_t deadline = test_now_ms() + timeout_ms;
	int st;

	if (!p->pid)
		return -1;
	if (p->paused)
		pg_server_resume(p);
	kill(p->pid, SIGINT);
	for (;;) {
		pid_t r = waitpid(p->pid, &st, WNOHANG);

		if (r == p->pid || (r < 0 && errno == ECHILD))
			break;
		if (test_now_ms() > deadline) {
			pg_server_signal_all(p, SIGKILL);
			waitpid(p->pid, &st, 0);
			break;
		}
		test_sleep_ms(10);
	}
	p->pid = 0;
	return 0;
}

static int pg_server_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void pg_server_destroy(struct pg_server *p)
{
	if (p->pid)
		pg_server_stop(p, 5000);
	if (p->dir[0] && !getenv("PG_SERVER_KEEP"))
		nftw(p->dir, pg_server_rm, 16, FTW_DEPTH | FTW_PHYS);
	p->dir[0] = '\0';
}

static void pg_server_notice_ignore(void *arg, const PGresult *r)
{
	(void)arg;
	(void)r;
}

int pg_server_query(const char *conninfo, const char *sql, char *out, size_t outlen)
{
	PGconn *c = PQconnectdb(conninfo);
	PGresult *r = NULL;
	int rc = -1;

	PQsetNoticeReceiver(c, pg_server_notice_ignore, NULL);

	if (out && outlen)
		out[0] = '\0';
	if (PQstatus(c) != CONNECTION_OK) {
		if (out && outlen)
			snprintf(out, outlen, "%.*s", (int)strcspn(PQerrorMessage(c), "\n"),
				 PQerrorMessage(c));
		goto done;
	}
	r = PQexec(c, sql);
	switch (PQresultStatus(r)) {
	case PGRES_TUPLES_OK:
		rc = PQntuples(r);
		if (out && outlen && rc > 0 && PQnfields(r) > 0)
			snprintf(out, outlen, "%s", PQgetvalue(r, 0, 0));
		break;
	case PGRES_COMMAND_OK:
		rc = 0;
		break;
	default:
		if (out && outlen)
			snprintf(out, outlen, "%.*s", (int)strcspn(PQerrorMessage(c), "\n"),
				 PQerrorMessage(c));
		break;
	}
done:
	if (r)
		PQclear(r);
	PQfinish(c);
	return rc;
}
