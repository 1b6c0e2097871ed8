/*
 * haproxyproc.c - HAProxy as a child process of a test (haproxyproc.h).
 * Processes are signalled by pid only.
 */
#include "tests/lib/haproxyproc.h"
#include "tests/lib/clock.h"
#include "tests/lib/port.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define HAPROXYPROC_ATTEMPTS 4

/* Runs argv with stdout into a pipe; its first line into out. 0 or -1. */
static int first_line_of(const char *const *argv, char *out, size_t cap)
{
	int fds[2], st;
	ssize_t n;
	size_t len = 0;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);

		dup2(fds[1], 1);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 2);
		}
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(fds[1]);
	while (len < cap - 1 && (n = read(fds[0], out + len, cap - 1 - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		len += (size_t)n;
	}
	close(fds[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	out[len] = '\0';
	out[strcspn(out, "\n")] = '\0';
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 && len > 0 ? 0 : -1;
}

int haproxyproc_version(const char *bin, int *major, int *minor)
{
	const char *argv[] = { bin, "-v", NULL };
	char line[256];
	const char *v;

	if (first_line_of(argv, line, sizeof(line)) < 0)
		return -1;
	/* "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/" */
	v = strstr(line, "version ");
	if (!v || sscanf(v + 8, "%d.%d", major, minor) != 2)
		return -1;
	return 0;
}

const char *haproxyproc_binary(int major)
{
	static char path[HAPROXYPROC_PATH_MAX];
	const char *env = getenv(major == 2 ? "HAPROXY" : "HAPROXY3");
	int maj, min;

	if (env && *env)
		snprintf(path, sizeof(path), "%s", env);
	else
		snprintf(path, sizeof(path), "%s",
			 major == 2 ? "haproxy" : "../shared/peers/haproxy-3.4/haproxy");
	if (haproxyproc_version(path, &maj, &min) < 0 || maj != major)
		return NULL;
	return path;
}

/* Writes the template to h->cfg_path with every token replaced. */
static int write_cfg(struct haproxyproc *h, const char *cfg, const char *const *vars)
{
	const char *names[HAPROXYPROC_PORTS + 2 + 32], *values[HAPROXYPROC_PORTS + 2 + 32];
	char ports[HAPROXYPROC_PORTS][16], pnames[HAPROXYPROC_PORTS][16];
	size_t ntok = 0;
	FILE *f = fopen(h->cfg_path, "w");

	if (!f) {
		snprintf(h->err, sizeof(h->err), "%s: %s", h->cfg_path, strerror(errno));
		return -1;
	}
	for (int i = 0; i < HAPROXYPROC_PORTS; i++) {
		snprintf(pnames[i], sizeof(pnames[i]), "@PORT%d@", i);
		snprintf(ports[i], sizeof(ports[i]), "%d", h->port[i]);
		names[ntok] = pnames[i];
		values[ntok++] = ports[i];
	}
	names[ntok] = "@DIR@";
	values[ntok++] = h->dir;
	names[ntok] = "@SOCK@";
	values[ntok++] = h->sock_path;
	for (size_t i = 0; vars && vars[i] && vars[i + 1] && ntok < sizeof(names) / sizeof(names[0]);
	     i += 2) {
		names[ntok] = vars[i];
		values[ntok++] = vars[i + 1];
	}
	while (*cfg) {
		size_t k;

		for (k = 0; k < ntok; k++)
			if (strncmp(cfg, names[k], strlen(names[k])) == 0)
				break;
		if (k < ntok) {
			fputs(values[k], f);
			cfg += strlen(names[k]);
		} else {
			fputc(*cfg++, f);
		}
	}
	return fclose(f) == 0 ? 0 : -1;
}

static pid_t spawn(struct haproxyproc *h, const char *const *args)
{
	const char *argv[40];
	size_t n = 0;
	int logfd;
	pid_t pid;

	argv[n++] = h->bin;
	argv[n++] = "-db";
	argv[n++] = "-f";
	argv[n++] = h->cfg_path;
	for (size_t i = 0; args && args[i] && n < sizeof(argv) / sizeof(argv[0]) - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	logfd = open(h->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (logfd < 0) {
		snprintf(h->err, sizeof(h->err), "%s: %s", h->log_path, strerror(errno));
		return -1;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);   /* not past the test's end */
		if (nul >= 0)
			dup2(nul, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		execvp(argv[0], (char *const *)argv);
		dprintf(2, "haproxyproc: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(logfd);
	if (pid < 0)
		snprintf(h->err, sizeof(h->err), "fork: %s", strerror(errno));
	return pid;
}

static bool accepts(int port)
{
	struct sockaddr_in sa;
	int fd = test_loopback_socket(&sa, port);
	bool ok;

	if (fd < 0)
		return false;
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static bool reap(struct haproxyproc *h, int timeout_ms)
{
	int64_t deadline = test_now_ms() + timeout_ms;

	while (!h->reaped) {
		pid_t r = waitpid(h->pid, &h->exit_status, WNOHANG);

		if (r == h->pid || (r < 0 && errno != EINTR)) {
			h->reaped = true;
			break;
		}
		if (test_now_ms() >= deadline)
			return false;
		test_sleep_ms(10);
	}
	return true;
}

static void pick_ports(struct haproxyproc *h)
{
	for (int i = 0; i < HAPROXYPROC_PORTS; i++) {
		h->port[i] = test_port(0);
		for (int j = 0; j < i; j++)
			if (h->port[j] == h->port[i]) {
				i--;
				break;
			}
	}
}

int haproxyproc_start(struct haproxyproc *h, const char *bin, const char *cfg,
		      const char *const *vars, const char *const *args, int timeout_ms)
{
	char tail[1024];

	memset(h, 0, sizeof(*h));
	if (strlen(bin) >= sizeof(h->bin)) {
		snprintf(h->err, sizeof(h->err), "binary path too long");
		return -1;
	}
	snprintf(h->bin, sizeof(h->bin), "%s", bin);
	snprintf(h->dir, sizeof(h->dir), "/tmp/haproxyproc-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(h->dir)) {
		snprintf(h->err, sizeof(h->err), "mkdtemp: %s", strerror(errno));
		h->dir[0] = '\0';
		return -1;
	}
	snprintf(h->cfg_path, sizeof(h->cfg_path), "%s/haproxy.cfg", h->dir);
	snprintf(h->log_path, sizeof(h->log_path), "%s/haproxy.log", h->dir);
	snprintf(h->sock_path, sizeof(h->sock_path), "%s/haproxy.sock", h->dir);
	for (int attempt = 0; attempt < HAPROXYPROC_ATTEMPTS; attempt++) {
		int64_t deadline = test_now_ms() + timeout_ms;

		pick_ports(h);
		if (write_cfg(h, cfg, vars) < 0)
			break;
		h->reaped = false;
		h->pid = spawn(h, args);
		if (h->pid < 0) {
			h->pid = 0;
			break;
		}
		while (test_now_ms() < deadline && !reap(h, 0) && !accepts(h->port[0]))
			test_sleep_ms(20);
		if (!h->reaped && accepts(h->port[0]))
			return 0;
		haproxyproc_log_tail(h, tail, sizeof(tail));
		if (!h->reaped) {
			snprintf(h->err, sizeof(h->err), "%.256s: not accepting on %d after %d ms: %s",
				 bin, h->port[0], timeout_ms, tail);
			kill(h->pid, SIGKILL);
			reap(h, 5000);
			break;
		}
		snprintf(h->err, sizeof(h->err), "%.256s exited: %s", bin, tail);
		/* another process took a port: try others */
		if (!strstr(tail, "cannot bind") && !strstr(tail, "Address already in use"))
			break;
	}
	h->pid = 0;
	haproxyproc_stop(h, 0, true);
	return -1;
}

int haproxyproc_stop(struct haproxyproc *h, int timeout_ms, bool keep)
{
	int st = -1;

	if (h->pid > 0) {
		if (!h->reaped) {
			kill(h->pid, SIGTERM);
			if (!reap(h, timeout_ms)) {
				kill(h->pid, SIGKILL);
				reap(h, 5000);
			}
		}
		st = h->exit_status;
		h->pid = 0;
	}
	if (!keep && h->dir[0]) {
		unlink(h->cfg_path);
		unlink(h->log_path);
		unlink(h->sock_path);
		rmdir(h->dir);
		h->dir[0] = '\0';
	}
	return st;
}

bool haproxyproc_alive(struct haproxyproc *h)
{
	return h->pid > 0 && !reap(h, 0);
}

int haproxyproc_cli(const struct haproxyproc *h, const char *cmd, char *out, size_t cap,
		    int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int64_t deadline = test_now_ms() + timeout_ms;
	size_t len = 0;
	int fd;

	if (cap == 0 || strlen(h->sock_path) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, h->sock_path, strlen(h->sock_path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    dprintf(fd, "%s\n", cmd) < 0) {
		close(fd);
		return -1;
	}
	/* the CLI closes once it has answered a single command */
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int64_t left = deadline - test_now_ms();
		ssize_t n;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			break;
		n = read(fd, out + len, cap - 1 - len);
		if (n <= 0 || (len += (size_t)n) == cap - 1)
			break;
	}
	close(fd);
	out[len] = '\0';
	return (int)len;
}

void haproxyproc_log_tail(const struct haproxyproc *h, char *out, size_t max)
{
	int fd = h->log_path[0] ? open(h->log_path, O_RDONLY | O_CLOEXEC) : -1;
	off_t size;
	ssize_t n = 0;

	out[0] = '\0';
	if (fd < 0 || max == 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	size = lseek(fd, 0, SEEK_END);
	if (size > (off_t)(max - 1))
		lseek(fd, size - (off_t)(max - 1), SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	n = read(fd, out, max - 1);
	out[n > 0 ? n : 0] = '\0';
	close(fd);
}
