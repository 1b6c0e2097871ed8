/*
 * test_balance.c - connections are shared out between the workers
 * (agent/balance.h). In one process: the pick (fewest connections, then
 * the lowest id, among the workers accepting), the wake-up of a waiting
 * worker when the pick moves to it, the stall mark, a dead worker's line.
 * A worker that missed its turn is passed over until it shows life.
 * With the agent and two workers: connections made one after the other
 * alternate between the workers, for SPOP over TCP and for the HTTP front
 * over a unix socket (a stopped worker leaves exactly every other
 * connection unanswered); the turn of a stopped worker is taken by the
 * other after BALANCE_STALL, not before, and only once: the following
 * connections go to the worker that runs, in turn, until the stopped one
 * runs again and is picked again.
 */
#include "agent/balance.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/spoptest.h"

#define START_MS  15000
#define IO_MS     3000
#define PROBE_MS  1000       /* how long a stopped worker's silence is watched */
#define NCONN     6
#define NFOLLOW   4          /* connections after a stopped worker's missed turn */

/* ------------------------------------------------------ in one process */

static struct balance *b;
static int efd[3];

static void setup3(void)
{
	char err[128];

	b = balance_new(3, err, sizeof(err));
	cr_assert_not_null(b, "%s", err);
	for (int i = 0; i < 3; i++)
		efd[i] = balance_attach(b, i);
}

static void teardown(void)
{
	balance_free(b);
	b = NULL;
}

/* Is worker id's eventfd readable (woken)? */
static bool woken(int id)
{
	struct pollfd p = { .fd = efd[id], .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

Test(pick, fewest_then_lowest_id_among_the_open, .init = setup3, .fini = teardown)
{
	cr_expect_eq(balance_pick(b, 0), -1, "nobody accepts yet");
	for (int i = 0; i < 3; i++)
		balance_open(b, i, 0, true);
	cr_expect_eq(balance_pick(b, 0), 0);
	cr_expect_eq(balance_add(b, 0, 0, 1), 1, "0 holds one: 1 is next");
	cr_expect_eq(balance_add(b, 1, 0, 1), 2);
	cr_expect_eq(balance_add(b, 2, 0, 1), 0, "all hold one: the lowest id");
	cr_expect_eq(balance_add(b, 0, 0, 1), 1);
	cr_expect_eq(balance_add(b, 1, 0, 1), 2);
	cr_expect_eq(balance_add(b, 1, 0, -1), 1, "a close makes 1 the fewest again");
	cr_expect_eq(balance_held(b, 0, 0), 2);
	cr_expect_eq(balance_held(b, 1, 0), 1);
	cr_expect_eq(balance_open(b, 1, 0, false), 2, "a paused worker is skipped");
	cr_expect_eq(balance_pick(b, 1), -1, "the other listener has its own turns");
	balance_open(b, 2, 1, true);
	cr_expect_eq(balance_pick(b, 1), 2);
}

Test(wake, the_new_pick_is_woken_if_it_waits, .init = setup3, .fini = teardown)
{
	uint64_t mark;

	balance_open(b, 0, 0, true);
	balance_open(b, 1, 0, true);
	cr_assert(balance_wait(b, 1, 0, &mark), "0 is the pick: 1 waits");
	cr_expect(!woken(1));
	cr_expect_eq(balance_add(b, 0, 0, 1), 1);
	cr_expect(woken(1), "0 took one: 1's turn, and it waits: woken");
	balance_woken(b, 1);
	cr_expect(!woken(1), "read, the eventfd is quiet again");
	balance_resume(b, 1, 0);

	cr_expect(!balance_wait(b, 1, 0, &mark), "1 is the pick: it does not wait");
	cr_expect_eq(balance_add(b, 1, 0, 1), 0);
	cr_expect(!woken(0), "0 does not wait: no wake-up to make");
}

Test(wake, stalled_until_anyone_accepts, .init = setup3, .fini = teardown)
{
	uint64_t mark;

	for (int i = 0; i < 3; i++)
		balance_open(b, i, 0, true);
	cr_assert(balance_wait(b, 2, 0, &mark));
	cr_expect(balance_stalled(b, 0, mark), "nobody accepted since");
	balance_add(b, 1, 0, 1);
	balance_add(b, 1, 0, -1);
	cr_expect(!balance_stalled(b, 0, mark), "1 accepted one (closed since: still counts)");
	balance_add(b, 0, 1, 1);
	cr_assert(balance_wait(b, 2, 0, &mark));
	balance_add(b, 0, 1, 1);
	cr_expect(balance_stalled(b, 0, mark), "accepts on another listener do not count");
}

Test(gone, a_dead_workers_line_is_cleared_and_the_next_woken, .init = setup3, .fini = teardown)
{
	uint64_t mark;

	balance_open(b, 0, 0, true);
	balance_open(b, 1, 0, true);
	balance_add(b, 1, 0, 1);
	cr_assert(balance_wait(b, 1, 0, &mark));
	balance_gone(b, 0);
	cr_expect_eq(balance_held(b, 0, 0), 0);
	cr_expect_eq(balance_pick(b, 0), 1, "the dead worker accepts no more");
	cr_expect(woken(1), "the new pick was waiting: woken by the master");
	cr_expect_eq(balance_attach(b, 0), efd[0], "a successor gets the same eventfd");
	cr_expect(!woken(0));
	cr_expect_eq(balance_pick(b, 0), 1, "until it opens");
	balance_open(b, 0, 0, true);
	cr_expect_eq(balance_pick(b, 0), 0);
}

Test(missed, passed_over_until_it_shows_life, .init = setup3, .fini = teardown)
{
	uint64_t mark;

	for (int i = 0; i < 3; i++)
		balance_open(b, i, 0, true);
	balance_add(b, 1, 0, 1);
	cr_assert_eq(balance_pick(b, 0), 0);
	cr_assert(balance_wait(b, 2, 0, &mark), "0 is the pick: 2 waits");
	cr_expect_eq(balance_missed(b, 1, 0, 0), 2, "0 missed its turn: 2 holds the fewest "
		     "of the others");
	cr_expect(woken(2), "and waits: woken");
	balance_woken(b, 2);
	balance_resume(b, 2, 0);
	cr_expect_eq(balance_pick(b, 1), -1, "other listeners: untouched");
	balance_open(b, 0, 1, true);
	cr_expect_eq(balance_pick(b, 1), 0);
	cr_expect_eq(balance_add(b, 2, 0, 1), 1, "0 holds nothing and is still passed over");
	cr_expect_eq(balance_add(b, 1, 0, 1), 2);
	cr_expect_eq(balance_missed(b, 1, 0, 2), 1, "2 missed its turn too");
	cr_expect_eq(balance_missed(b, 2, 0, 1), 0, "all passed over: the fewest of them again");
	cr_expect_eq(balance_missed(b, 0, 0, 0), 0, "nobody passes itself over");
	cr_expect(balance_alive(b, 1) && balance_alive(b, 2));
	cr_expect(balance_alive(b, 0), "0 was passed over");
	cr_expect(!balance_alive(b, 0), "once: it shows life, nothing more to undo");
	cr_expect_eq(balance_pick(b, 0), 0, "its loop ran: picked again");
	balance_missed(b, 1, 0, 0);
	cr_expect_eq(balance_pick(b, 0), 2, "passed over again after another miss");
	balance_gone(b, 0);
	balance_attach(b, 0);
	balance_open(b, 0, 0, true);
	cr_expect_eq(balance_pick(b, 0), 0, "a successor is not passed over for its "
		     "predecessor's miss");
}

/* ------------------------------------------------------ with the agent */

static pid_t wpid[2];
static bool stopped;

/* The number of lines of the agent's log that hold a and a2. */
static int log_lines(const char *a, const char *a2)
{
	return (int)agentproc_log_lines(&test_agent, a, a2);
}

/* The connections worker id accepted (its debug lines, -v). */
static int accepted_by(int id)
{
	char who[32];

	snprintf(who, sizeof(who), " w%d] debug: ", id);
	return log_lines(who, " accepted (");
}

/* The pid of worker id, from its "worker <id> serving" line (-v), which
 * it writes once it accepts; 0 if not there yet. */
static pid_t log_worker_pid(int id)
{
	char line[512], want[64];
	FILE *f = fopen(test_agent.log_path, "r");
	long pid = 0;

	if (!f)
		return 0;
	snprintf(want, sizeof(want), " w%d] debug: worker %d serving", id, id);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, want) && sscanf(strstr(line, "[pid "), "[pid %ld", &pid) == 1)
			break;
	fclose(f);
	return (pid_t)pid;
}

/* Starts the agent with two workers and waits until both accept. */
static void start_two(const char *json)
{
	static const char *const args[] = { "-w", "2", "-v", NULL };

	test_agent_start(json, args);
	for (int i = 0; i < START_MS / 10; i++) {
		wpid[0] = log_worker_pid(0);
		wpid[1] = log_worker_pid(1);
		if (wpid[0] && wpid[1])
			return;
		test_sleep_ms(10);
	}
	cr_assert_fail("both workers serving\n%s", test_agent_log_tail());
}

static void stop_worker0(bool stop)
{
	cr_assert_eq(kill(wpid[0], stop ? SIGSTOP : SIGCONT), 0);
	stopped = stop;
}

static void stop_agent(void)
{
	if (stopped)
		kill(wpid[0], SIGCONT);
	stopped = false;
	test_agent_stop();
}

/* Sends a request on each fd, then watches them for PROBE_MS: bit i of
 * the result is set if fd[i] answered (what came is read and dropped). */
static unsigned probe(const int *fd, int n, void (*send_one)(int fd))
{
	struct pollfd p[16];
	unsigned answered = 0;
	int64_t end = test_now_ms() + PROBE_MS;
	char sink[65536];

	for (int i = 0; i < n; i++) {
		send_one(fd[i]);
		p[i] = (struct pollfd){ .fd = fd[i], .events = POLLIN };
	}
	for (int64_t now; (now = test_now_ms()) < end;) {
		if (poll(p, (nfds_t)n, (int)(end - now)) <= 0)
			continue;
		for (int i = 0; i < n; i++) {
			if (!(p[i].revents & POLLIN))
				continue;
			answered |= 1u << i;
			if (recv(fd[i], sink, sizeof(sink), MSG_DONTWAIT) <= 0)
				p[i].fd = -1;
		}
	}
	return answered;
}

/* Connections i = 0, 2, 4... accepted by worker 0, the others by worker
 * 1: with worker 0 stopped, exactly the odd ones answer. */
#define ODD_OF_6 0x2au

/* --- SPOP over TCP --- */

/* A HELLO, not waiting for its answer. */
static void send_hello(int fd)
{
	struct rawspop_hello_opts o = rawspop_hello_defaults();

	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	sp_send(fd);
}

/* A connection that said HELLO and got the AGENT-HELLO: accepted. */
static int spop_open(void)
{
	return sp_open(test_agent.port);
}

static void send_notify(int fd)
{
	static const struct sp_msg m = { .key = "balance", .window = 60 };
	static uint64_t sid = 1;

	rawspop_buf_reset(&sp_wb);
	sp_put_notify(sid++, 1, &m, 1);
	sp_send(fd);
}

Test(agent, spop_connections_alternate_and_a_stuck_turn_passes, .fini = stop_agent,
     .timeout = 120)
{
	int fd[NCONN + NFOLLOW + 2];
	int n = NCONN + NFOLLOW + 2;

	start_two(NULL);
	for (int i = 0; i < NCONN; i++)
		fd[i] = spop_open();
	stop_worker0(true);
	/* agentproc's own connect (to see the agent listen) may still be
	 * open at the first ones and shift the pattern: the split is what
	 * holds, 3 each. */
	unsigned got = probe(fd, NCONN, send_notify);
	cr_expect_eq(__builtin_popcount(got), NCONN / 2, "worker 0 stopped: connections "
		     "answering 0x%x, want three of six\n%s", got, test_agent_log_tail());

	/* Three each: worker 0's turn, and it is stopped. Worker 1 takes the
	 * connection once BALANCE_STALL has passed with no accept. */
	int64_t t0 = test_now_ms();
	fd[NCONN] = rawspop_connect(test_agent.port, IO_MS);
	cr_assert(fd[NCONN] >= 0);
	send_hello(fd[NCONN]);
	cr_assert_eq(rawspop_read_frame(fd[NCONN], &sp_fr, 5000), RAWSPOP_READ_FRAME,
		     "the stopped worker's turn was not taken\n%s", test_agent_log_tail());
	int64_t ms = test_now_ms() - t0;
	cr_log_info("worker 0 stopped: a new connection answered after %lld ms\n", (long long)ms);
	cr_expect_geq(ms, (int64_t)(BALANCE_STALL * 1000 / 2),
		      "answered after %lld ms: worker 1 took it before the stall", (long long)ms);
	cr_expect(log_lines("out of turn", NULL) > 0, "%s", test_agent_log_tail());
	int out_of_turn = log_lines(" accepted (", ", out of turn)");
	cr_expect_eq(out_of_turn, 1, "one connection taken out of turn\n%s", test_agent_log_tail());

	/* Worker 0 missed its turn: it is passed over while it is stopped.
	 * The next connections are worker 1's, in turn: none waits for a
	 * stall, none is taken out of turn. */
	t0 = test_now_ms();
	for (int i = 0; i < NFOLLOW; i++)
		fd[NCONN + 1 + i] = spop_open();
	cr_log_info("worker 0 passed over: %d more connections answered in %lld ms\n", NFOLLOW,
		    (long long)(test_now_ms() - t0));
	cr_expect_eq(log_lines(" accepted (", ", out of turn)"), out_of_turn, "the connections "
		     "after the first one waited for worker 0's turn\n%s", test_agent_log_tail());

	/* Worker 0 runs again (its loop runs: it answers what was sent while
	 * it was stopped): it is picked again, holding the fewest. */
	stop_worker0(false);
	got = probe(fd, n - 1, send_notify);
	cr_expect_eq(got, (1u << (n - 1)) - 1, "all answer once worker 0 runs again (0x%x)", got);
	int by0 = accepted_by(0);
	fd[n - 1] = spop_open();
	cr_expect_eq(accepted_by(0), by0 + 1, "worker 0 runs again and holds the fewest: the "
		     "next connection is its\n%s", test_agent_log_tail());
	got = probe(fd, n, send_notify);
	cr_expect_eq(got, (1u << n) - 1, "all answer (0x%x)", got);
	for (int i = 0; i < n; i++)
		close(fd[i]);
}

/* --- the HTTP front over a unix socket --- */

static char sock_path[108];

static void send_get(int fd)
{
	static const char req[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";

	cr_assert(rawspop_send(fd, req, sizeof(req) - 1) == 0);
}

/* Reads one whole answer (head, then Content-Length bytes of body). */
static void read_answer(int fd)
{
	char buf[4096];
	size_t len = 0;
	const char *end = NULL, *cl;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		buf[len] = '\0';
		if ((end = strstr(buf, "\r\n\r\n")) && (cl = strcasestr(buf, "content-length:")) &&
		    len >= (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10))
			return;
		cr_assert_eq(poll(&p, 1, IO_MS), 1, "no whole answer: %s\n%s", buf, test_agent_log_tail());
		ssize_t k = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
		cr_assert_gt(k, 0);
		len += (size_t)k;
	}
}

static int unix_open(void)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sock_path);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0, "connect %s: %s",
		     sock_path, strerror(errno));
	send_get(fd);
	read_answer(fd);
	return fd;
}

Test(agent, http_unix_connections_alternate, .fini = stop_agent, .timeout = 120)
{
	char json[256];
	int fd[NCONN];

	snprintf(sock_path, sizeof(sock_path), "/tmp/test_balance-%d.sock", (int)getpid());
	snprintf(json, sizeof(json), "{\"http_listen\": \"unix:%s\"}", sock_path);
	start_two(json);
	for (int i = 0; i < NCONN; i++)
		fd[i] = unix_open();
	stop_worker0(true);
	unsigned got = probe(fd, NCONN, send_get);
	cr_expect_eq(got, ODD_OF_6, "worker 0 stopped: connections answering 0x%x, want 0x%x "
		     "(every other one)\n%s", got, ODD_OF_6, test_agent_log_tail());
	stop_worker0(false);
	for (int i = 0; i < NCONN; i++)
		close(fd[i]);
}
