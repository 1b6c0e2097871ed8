/*
 * agentproc.c - starts and stops the agent binary for tests (see
 * agentproc.h). Processes are only ever signalled by pid.
 */
#include "tests/lib/agentproc.h"
#include "tests/lib/clock.h"
#include "tests/lib/port.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *agentproc_binary(void)
{
	const char *env = getenv("AGENT");

	return env && *env ? env : "build/san/spoa-ratelimit";
}

bool agentproc_available(void)
{
	return access(agentproc_binary(), X_OK) == 0;
}

static bool can_connect(int port)
{
	struct sockaddr_in sa;
	int fd, ok;

	fd = test_loopback_socket(&sa, port);
	if (fd < 0)
		return false;
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/* Writes json with every "@PORT@" replaced by port and "@HTTP_PORT@" by
 * http_port. Returns 0 or -1. */
static int write_config(struct agentproc *a, const char *json)
{
	char port[16], hport[16];
	const char *p = json;
	FILE *f;
	int fd;

	snprintf(a->cfg_path, sizeof(a->cfg_path), "/tmp/agentproc-%d-XXXXXX.json", (int)getpid());
	fd = mkstemps(a->cfg_path, 5);
	if (fd < 0) {
		snprintf(a->err, sizeof(a->err), "mkstemps: %s", strerror(errno));
		a->cfg_path[0] = '\0';
		return -1;
	}
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		return -1;
	}
	snprintf(port, sizeof(port), "%d", a->port);
	snprintf(hport, sizeof(hport), "%d", a->http_port);
	for (;;) {
		const char *t1 = strstr(p, "@PORT@"), *t2 = strstr(p, "@HTTP_PORT@");
		const char *tok = t1 && (!t2 || t1 < t2) ? t1 : t2;

		if (!tok)
			break;
		fwrite(p, 1, (size_t)(tok - p), f);
		fputs(tok == t1 ? port : hport, f);
		p = tok + (tok == t1 ? 6 : 11);
	}
	fputs(p, f);
	return fclose(f) == 0 ? 0 : -1;
}

static pid_t spawn(struct agentproc *a, const char *const *args)
{
	const char *argv[AGENTPROC_MAX_ARGS + 8];
	char listen[64];
	size_t n = 0;
	pid_t pid;
	int logfd;

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", a->port);
	argv[n++] = a->bin;
	argv[n++] = AGENTPROC_OPT_LISTEN;
	argv[n++] = listen;
	if (a->cfg_path[0]) {
		argv[n++] = AGENTPROC_OPT_CONFIG;
		argv[n++] = a->cfg_path;
	}
	for (size_t i = 0; args && args[i] && i < AGENTPROC_MAX_ARGS; i++)
		argv[n++] = args[i];
	argv[n] = NULL;

	logfd = open(a->log_path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (logfd < 0) {
		snprintf(a->err, sizeof(a->err), "open %s: %s", a->log_path, strerror(errno));
		return -1;
	}
	/* The log shows what ran. */
	dprintf(logfd, "## agentproc:");
	for (size_t i = 0; i < n; i++)
		dprintf(logfd, " %s", argv[i]);
	dprintf(logfd, "\n");

	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		snprintf(a->err, sizeof(a->err), "fork: %s", strerror(errno));
		close(logfd);
		return -1;
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY);

		/* Do not outlive the test process if it crashes. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (nul >= 0)
			dup2(nul, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		execv(a->bin, (char *const *)argv);
		dprintf(2, "agentproc: exec %s: %s\n", a->bin, strerror(errno));
		_exit(127);
	}
	close(logfd);
	return pid;
}

int agentproc_start(struct agentproc *a, const char *json, const char *const *args,
		    int timeout_ms)
{
	int fd;

	memset(a, 0, sizeof(*a));
	snprintf(a->bin, sizeof(a->bin), "%s", agentproc_binary());
	if (access(a->bin, X_OK) < 0) {
		snprintf(a->err, sizeof(a->err), "%s: %s", a->bin, strerror(errno));
		return -1;
	}
	snprintf(a->log_path, sizeof(a->log_path), "/tmp/agentproc-%d-XXXXXX.log", (int)getpid());
	fd = mkstemps(a->log_path, 4);
	if (fd < 0) {
		snprintf(a->err, sizeof(a->err), "mkstemps: %s", strerror(errno));
		return -1;
	}
	close(fd);

	/* The master listens on SPOP, then on HTTP: a test that connects to
	 * the HTTP front as soon as SPOP accepts was refused now and then on
	 * a busy machine. Both must accept. */
	bool http = json && strstr(json, "127.0.0.1:@HTTP_PORT@");

	for (int attempt = 0; attempt < 4; attempt++) {
		int64_t deadline = test_now_ms() + timeout_ms;
		bool exited = false;

		a->port = test_port(0);
		a->http_port = test_port(0);
		for (int k = 0; k < 8 && a->http_port == a->port; k++)
			a->http_port = test_port(0);
		if (a->port < 0 || a->http_port < 0) {
			snprintf(a->err, sizeof(a->err), "no free port: %s", strerror(errno));
			return -1;
		}
		if (a->cfg_path[0]) {
			unlink(a->cfg_path);
			a->cfg_path[0] = '\0';
		}
		if (json && write_config(a, json) < 0)
			return -1;
		a->pid = spawn(a, args);
		if (a->pid < 0) {
			a->pid = 0;
			return -1;
		}
		a->reaped = false;
		while (test_now_ms() < deadline) {
			int st;

			if (waitpid(a->pid, &st, WNOHANG) == a->pid) {
				a->reaped = true;
				a->exit_status = st;
				exited = true;
				break;
			}
			if (can_connect(a->port) && (!http || can_connect(a->http_port)))
				return 0;
			test_sleep_ms(20);
		}
		if (!exited) {
			snprintf(a->err, sizeof(a->err),
				 "agent pid %d not accepting on port %d%s after %d ms (log %s)",
				 (int)a->pid, a->port, http ? " and its HTTP port" : "", timeout_ms,
				 a->log_path);
			agentproc_stop(a, 2000, false);
			return -1;
		}
		snprintf(a->err, sizeof(a->err), "agent exited early with %s %d (log %s)",
			 WIFEXITED(a->exit_status) ? "status" : "signal",
			 WIFEXITED(a->exit_status) ? WEXITSTATUS(a->exit_status)
						   : WTERMSIG(a->exit_status),
			 a->log_path);
		a->pid = 0;
		/* 127: exec failed; 1/2/64..78: most likely a usage or config
		 * error, which another port will not fix. Only retry when the
		 * log blames the address. */
		{
			char tail[2048];

			agentproc_log_tail(a, tail, sizeof(tail));
			if (!strstr(tail, "in use") && !strstr(tail, "EADDRINUSE"))
				break;
		}
	}
	if (a->cfg_path[0]) {
		unlink(a->cfg_path);
		a->cfg_path[0] = '\0';
	}
	return -1;
}

int agentproc_signal(struct agentproc *a, int sig)
{
	if (!a->pid || a->reaped)
		return -1;
	return kill(a->pid, sig);
}

int agentproc_wait(struct agentproc *a, int timeout_ms)
{
	int64_t deadline = test_now_ms() + timeout_ms;

	if (!a->pid)
		return -1;
	if (a->reaped)
		return 0;
	for (;;) {
		int st;
		pid_t r = waitpid(a->pid, &st, WNOHANG);

		if (r == a->pid) {
			a->reaped = true;
			a->exit_status = st;
			return 0;
		}
		if (r < 0 && errno != EINTR) {
			a->reaped = true;
			a->exit_status = -1;
			return 0;
		}
		if (test_now_ms() >= deadline)
			return -1;
		test_sleep_ms(10);
	}
}

int agentproc_stop(struct agentproc *a, int timeout_ms, bool remove_log)
{
	pid_t kids[64];
	size_t nkids = 0;
	int st = -1;

	if (a->pid) {
		if (!a->reaped) {
			nkids = agentproc_children(a->pid, kids, 64);
			kill(a->pid, SIGTERM);
			if (agentproc_wait(a, timeout_ms) < 0) {
				kill(a->pid, SIGKILL);
				agentproc_wait(a, 5000);
			}
		}
		st = a->exit_status;
		/* Workers that outlived their master are ours to clean up. */
		for (size_t i = 0; i < nkids; i++) {
			int64_t deadline = test_now_ms() + 2000;

			while (agentproc_pid_alive(kids[i]) && test_now_ms() < deadline)
				test_sleep_ms(10);
			if (agentproc_pid_alive(kids[i]))
				kill(kids[i], SIGKILL);
		}
		a->pid = 0;
	}
	if (a->cfg_path[0]) {
		unlink(a->cfg_path);
		a->cfg_path[0] = '\0';
	}
	if (remove_log && a->log_path[0]) {
		unlink(a->log_path);
		a->log_path[0] = '\0';
	}
	return st;
}

/* The state letter of /proc/<pid>/stat and its ppid; -1 if absent. */
static int proc_stat(pid_t pid, char *state, pid_t *ppid)
{
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* "pid (comm) S ppid ...": comm may hold spaces and parentheses. */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return -1;
	*state = p[2];
	*ppid = (pid_t)strtol(p + 4, NULL, 10);
	return 0;
}

bool agentproc_pid_alive(pid_t pid)
{
	char state;
	pid_t ppid;

	if (pid <= 0 || proc_stat(pid, &state, &ppid) < 0)
		return false;
	return state != 'Z' && state != 'X' && state != 'x';
}

bool agentproc_alive(struct agentproc *a)
{
	if (!a->pid || a->reaped)
		return false;
	if (agentproc_wait(a, 0) == 0)
		return false;
	return agentproc_pid_alive(a->pid);
}

static int cmp_pid(const void *x, const void *y)
{
	pid_t a = *(const pid_t *)x, b = *(const pid_t *)y;

	return (a > b) - (a < b);
}

static void add_pid(pid_t *out, size_t max, size_t *n, pid_t pid)
{
	for (size_t i = 0; i < *n; i++)
		if (out[i] == pid)
			return;
	if (*n < max && agentproc_pid_alive(pid))
		out[(*n)++] = pid;
}

size_t agentproc_children(pid_t pid, pid_t *out, size_t max)
{
	char path[64];
	size_t n = 0;
	bool have_children_files = false;
	DIR *d;
	struct dirent *de;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (d) {
		while ((de = readdir(d))) {
			char cpath[320];
			FILE *f;
			long c;

			if (de->d_name[0] == '.')
				continue;
			snprintf(cpath, sizeof(cpath), "/proc/%d/task/%s/children", (int)pid,
				 de->d_name);
			f = fopen(cpath, "r");
			if (!f)
				continue;
			have_children_files = true;
			while (fscanf(f, "%ld", &c) == 1)
				add_pid(out, max, &n, (pid_t)c);
			fclose(f);
		}
		closedir(d);
	}
	if (!have_children_files) {
		d = opendir("/proc");
		if (!d)
			return 0;
		while ((de = readdir(d))) {
			char *end, state;
			long c = strtol(de->d_name, &end, 10);
			pid_t ppid;

			if (*end || c <= 0)
				continue;
			if (proc_stat((pid_t)c, &state, &ppid) == 0 && ppid == pid)
				add_pid(out, max, &n, (pid_t)c);
		}
		closedir(d);
	}
	qsort(out, n, sizeof(*out), cmp_pid);
	return n;
}

size_t agentproc_log_lines(const struct agentproc *a, const char *needle, const char *needle2)
{
	char line[4096];
	size_t n = 0;
	FILE *f;

	if (!a->log_path[0] || !(f = fopen(a->log_path, "r")))
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) && (!needle2 || strstr(line, needle2));
	fclose(f);
	return n;
}

void agentproc_log_tail(const struct agentproc *a, char *out, size_t max)
{
	FILE *f;
	long size;
	size_t n;

	if (!max)
		return;
	out[0] = '\0';
	if (!a->log_path[0] || !(f = fopen(a->log_path, "r")))
		return;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	if (size > (long)(max - 1))
		fseek(f, size - (long)(max - 1), SEEK_SET);
	else
		fseek(f, 0, SEEK_SET);
	n = fread(out, 1, max - 1, f);
	out[n] = '\0';
	fclose(f);
}

bool agentproc_log_has_crash(const struct agentproc *a)
{
	static const char *const marks[] = {
		"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
		"SUMMARY: UndefinedBehaviorSanitizer", "AddressSanitizer:DEADLYSIGNAL",
		/* The master's line when a worker dies unexpectedly. */
		"respawning",
	};
	char line[4096];
	bool found = false;
	FILE *f;

	if (!a->log_path[0] || !(f = fopen(a->log_path, "r")))
		return false;
	while (!found && fgets(line, sizeof(line), f))
		for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
			if (strstr(line, marks[i]))
				found = true;
	fclose(f);
	return found;
}

bool agentproc_finish(struct agentproc *a, int timeout_ms)
{
	bool crash;

	if (!a->log_path[0])
		return false;
	agentproc_stop(a, timeout_ms, false);
	crash = agentproc_log_has_crash(a);
	if (!crash)
		agentproc_stop(a, 0, true);
	return crash;
}
