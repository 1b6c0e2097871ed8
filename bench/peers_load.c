/*
 * peers_load.c - the peers front under load (docs/PEERS.md): plays C
 * HAProxy nodes against an agent's peers listener, each sending N updates
 * of an http_req_rate table as fast as the socket takes them, and reports
 * the updates the agent absorbed per second (from the first update sent
 * to the agent's acknowledgement of the last), and, given the agent's
 * master pid, its workers' CPU per update.
 *
 *   peers_load [-p port] [-c nodes] [-n updates] [-k keys] [-W window]
 *              [-P master_pid] [-q]
 *
 * The agent's configuration must name the tables and the period (-W, 10):
 *   "peers": { "listen": "127.0.0.1:PORT", "name": "agg" },
 *   "namespaces": [ { "name": "api", "window_sizes": [10],
 *     "haproxy_tables": { "from": "req_local", "into": "req_cluster" } } ]
 *
 * Each node says hello as load<i>, answers the agent's resync request with
 * its dump (the DEFINEs of /req_cluster and /req_local, 00 01), confirms
 * nothing, then sends its updates: keys 10.x.y.z cycling over -k keys
 * (each node its own part of every key, as behind a load balancer), each
 * update a new event of its key (curr one more than the last, in one
 * period of the node's that began at its first update: age the time since),
 * explicit ids 1..N, written 64 KiB at a time; it reads what the agent
 * sends meanwhile (its pushes of the sums into /req_cluster, acks,
 * heartbeats) and stops at the ack of id N. One thread, one poll loop.
 *
 * Then it reads the agent's last pushes for half a second: each key's sum
 * (curr + prev of the last push) must be every node's events of it (a
 * fresh agent, a run shorter than the window).
 *
 * RESULT nodes=C updates=<all> seconds=<s> updates_per_s=<r>
 *        [cpu_us_per_update=<us>] pushes=<updates the agent pushed back>
 *        sums_right=<keys whose last push was right>/<keys>
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent/peers_wire.h"

#define LOAD_NODES_MAX 16
#define LOAD_OUT       65536
#define LOAD_IN        (1 << 20)

struct load_node {
	int fd;
	uint64_t sent, acked, pushes;
	double *pushed;                 /* per key: the last sum pushed (curr + prev) */
	uint8_t out[LOAD_OUT];
	size_t olen, ooff;
	uint8_t *in;
	size_t ilen;
	uint32_t *curr;                 /* per key: events sent */
	double start;                   /* its period's start: its first update (a run
	                                   is shorter than a period) */
	uint32_t nkeys;
	bool up;                        /* the agent's resync request answered */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* utime + stime of pid's children (the workers), in clock ticks. */
static unsigned long long workers_cpu(int master)
{
	char path[64], buf[1024];
	unsigned long long sum = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", master, master);
	if (!(f = fopen(path, "r")))
		return 0;
	int pid;
	while (fscanf(f, "%d", &pid) == 1) {
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		FILE *s = fopen(path, "r");
		if (!s)
			continue;
		if (fgets(buf, sizeof(buf), s)) {
			char *p = strrchr(buf, ')');
			unsigned long long ut = 0, st = 0;
			if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
					&ut, &st) == 2)
				sum += ut + st;
		}
		fclose(s);
	}
	fclose(f);
	return sum;
}

static struct peers_wire_table table(uint64_t id, const char *name, uint32_t period_ms)
{
	struct peers_wire_table t = {
		.id = id, .name = { name, strlen(name) }, .key_type = PEERS_WIRE_KEY_IPV4,
		.key_len = 4, .data = PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_HTTP_REQ_RATE),
		.has_expire = true, .expire = 60000,
	};
	t.period[PEERS_WIRE_DT_HTTP_REQ_RATE] = period_ms;
	return t;
}

static void die(const char *what)
{
	fprintf(stderr, "peers_load: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void send_all(int fd, const void *p, size_t n)
{
	if (send(fd, p, n, MSG_NOSIGNAL) != (ssize_t)n)
		die("send");
}

/* Connects, says hello, reads 200. */
static void node_open(struct load_node *n, int port, int i)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	char hello[64];
	uint8_t st[16];
	size_t got = 0;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if ((n->fd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    connect(n->fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("connect");
	int k = snprintf(hello, sizeof(hello), "HAProxyS 2.1\nagg\nload%d %d 1\n", i, 1000 + i);
	send_all(n->fd, hello, (size_t)k);
	while (got < 4) {
		ssize_t r = recv(n->fd, st + got, 4 - got, 0);
		if (r <= 0)
			die("status");
		got += (size_t)r;
	}
	if (memcmp(st, "200\n", 4) != 0) {
		fprintf(stderr, "peers_load: the agent answered %.3s\n", st);
		exit(1);
	}
}

/* Reads what the agent sent: answers its resync request with the dump
 * once, counts acks of our table and pushes. */
static void node_read(struct load_node *n, const struct peers_wire_table *from,
		      const struct peers_wire_table *into)
{
	ssize_t r = recv(n->fd, n->in + n->ilen, LOAD_IN - n->ilen, MSG_DONTWAIT);
	size_t off = 0;

	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
		die("recv (the agent closed)");
	if (r > 0)
		n->ilen += (size_t)r;
	for (;;) {
		struct peers_wire_msg m;
		enum peers_wire_err err;
		int rc = peers_wire_msg_decode(n->in + off, n->ilen - off, PEERS_WIRE_MSG_MAX, &m, &err);
		if (rc <= 0)
			break;
		off += (size_t)rc;
		if (m.kind == PEERS_WIRE_MSG_RESYNCREQ && !n->up) {
			uint8_t b[512];
			struct peers_wire_writer w;
			peers_wire_writer_init(&w, b, sizeof(b));
			peers_wire_encode_define(&w, into);
			peers_wire_encode_define(&w, from);
			peers_wire_encode_ctrl(&w, PEERS_WIRE_MSG_RESYNCFINISHED);
			send_all(n->fd, w.buf, w.len);
			n->up = true;
		} else if (m.kind == PEERS_WIRE_MSG_ACK) {
			uint64_t t;
			uint32_t id;
			if (peers_wire_ack_decode(m.payload, m.len, &t, &id, &err) > 0 && t == from->id)
				n->acked = id;
		} else if (m.kind == PEERS_WIRE_MSG_UPDATE) {
			static struct peers_wire_update u;
			n->pushes++;
			if (peers_wire_update_decode(m.type, m.payload, m.len, into, &u, &err) > 0 &&
			    u.key.len == 4 && u.key.ptr[0] == 10) {
				uint32_t k = (uint32_t)u.key.ptr[1] << 16 | (uint32_t)u.key.ptr[2] << 8 |
					     u.key.ptr[3];
				const struct peers_wire_freq *f = &u.f[PEERS_WIRE_DT_HTTP_REQ_RATE];
				if (k < n->nkeys)
					n->pushed[k] = (double)(f->curr + f->prev);
			}
		}
	}
	memmove(n->in, n->in + off, n->ilen - off);
	n->ilen -= off;
}

/* Fills the output buffer with the next updates. */
static void node_fill(struct load_node *n, const struct peers_wire_table *from, uint64_t total,
		      uint32_t keys, int node)
{
	static struct peers_wire_update u;
	struct peers_wire_writer w;

	if (n->ooff == n->olen)
		n->ooff = n->olen = 0;
	if (n->start == 0)
		n->start = now_s();
	uint64_t age = (uint64_t)((now_s() - n->start) * 1000);
	peers_wire_writer_init(&w, n->out + n->olen, LOAD_OUT - n->olen);
	while (n->sent < total) {
		uint32_t k = (uint32_t)((n->sent + (uint64_t)node * 7919) % keys);
		uint8_t ip[4] = { 10, (uint8_t)(k >> 16), (uint8_t)(k >> 8), (uint8_t)k };
		u.has_id = true;
		u.id = (uint32_t)(n->sent + 1);
		u.key.ptr = ip;
		u.key.len = 4;
		u.f[PEERS_WIRE_DT_HTTP_REQ_RATE] = (struct peers_wire_freq){ age, n->curr[k] + 1, 0 };
		if (peers_wire_encode_update(&w, from, &u) < 0)
			break;
		n->curr[k]++;
		n->sent++;
	}
	n->olen += w.len;
}

int main(int argc, char **argv)
{
	int port = 10000, nodes = 1, master = 0, opt;
	uint64_t total = 1000000;
	uint32_t keys = 10000, window = 10;
	bool quiet = false;
	static struct load_node ns[LOAD_NODES_MAX];

	while ((opt = getopt(argc, argv, "p:c:n:k:W:P:q")) != -1) {
		switch (opt) {
		case 'p': port = atoi(optarg); break;
		case 'c': nodes = atoi(optarg); break;
		case 'n': total = strtoull(optarg, NULL, 10); break;
		case 'k': keys = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'W': window = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'P': master = atoi(optarg); break;
		case 'q': quiet = true; break;
		default:
			fprintf(stderr, "usage: peers_load [-p port] [-c nodes] [-n updates] [-k keys] "
				"[-W window] [-P master_pid] [-q]\n");
			return 2;
		}
	}
	if (nodes < 1 || nodes > LOAD_NODES_MAX || keys < 1 || total < 1 || total > UINT32_MAX) {
		fprintf(stderr, "peers_load: 1..%d nodes, keys >= 1, 1..2^32-1 updates\n",
			LOAD_NODES_MAX);
		return 2;
	}
	struct peers_wire_table from = table(2, "/req_local", window * 1000);
	struct peers_wire_table into = table(1, "/req_cluster", window * 1000);
	for (int i = 0; i < nodes; i++) {
		ns[i].in = malloc(LOAD_IN);
		ns[i].curr = calloc(keys, sizeof(uint32_t));
		ns[i].pushed = calloc(keys, sizeof(double));
		ns[i].nkeys = keys;
		if (!ns[i].in || !ns[i].curr || !ns[i].pushed)
			die("malloc");
		node_open(&ns[i], port, i);
	}
	/* Until every node's dump is in (the agent asked for it). */
	double until = now_s() + 10;
	for (int ready = 0; ready < nodes && now_s() < until;) {
		ready = 0;
		for (int i = 0; i < nodes; i++) {
			struct pollfd p = { .fd = ns[i].fd, .events = POLLIN };
			if (!ns[i].up && poll(&p, 1, 10) > 0)
				node_read(&ns[i], &from, &into);
			ready += ns[i].up;
		}
	}
	usleep(200000);                 /* the agent's answer, its DEFINE */
	unsigned long long cpu0 = master ? workers_cpu(master) : 0;
	double t0 = now_s();
	int done = 0;
	while (done < nodes && now_s() - t0 < 600) {
		struct pollfd p[LOAD_NODES_MAX];
		for (int i = 0; i < nodes; i++) {
			if (ns[i].sent < total && ns[i].ooff == ns[i].olen)
				node_fill(&ns[i], &from, total, keys, i);
			p[i] = (struct pollfd){ .fd = ns[i].fd, .events = POLLIN |
						(ns[i].ooff < ns[i].olen ? POLLOUT : 0) };
		}
		if (poll(p, (nfds_t)nodes, 100) < 0 && errno != EINTR)
			die("poll");
		done = 0;
		for (int i = 0; i < nodes; i++) {
			if (p[i].revents & POLLIN)
				node_read(&ns[i], &from, &into);
			if (p[i].revents & POLLOUT) {
				ssize_t w = send(ns[i].fd, ns[i].out + ns[i].ooff, ns[i].olen - ns[i].ooff,
						 MSG_NOSIGNAL | MSG_DONTWAIT);
				if (w > 0)
					ns[i].ooff += (size_t)w;
				else if (errno != EAGAIN && errno != EINTR)
					die("send");
			}
			done += ns[i].acked == total;
		}
	}
	double secs = now_s() - t0;
	unsigned long long cpu1 = master ? workers_cpu(master) : 0;
	/* The last pushes: every key's sum should be all nodes' events. */
	for (double end = now_s() + 0.5; now_s() < end;) {
		for (int i = 0; i < nodes; i++) {
			struct pollfd p = { .fd = ns[i].fd, .events = POLLIN };
			if (poll(&p, 1, 10) > 0)
				node_read(&ns[i], &from, &into);
		}
	}
	uint32_t right = 0;
	for (uint32_t k = 0; k < keys; k++) {
		double events = 0;
		for (int i = 0; i < nodes; i++)
			events += ns[i].curr[k];
		right += ns[0].pushed[k] == events;
	}
	uint64_t all = 0, acked = 0, pushes = 0;
	for (int i = 0; i < nodes; i++) {
		all += ns[i].sent;
		acked += ns[i].acked;
		pushes += ns[i].pushes;
		close(ns[i].fd);
	}
	if (!quiet && acked < all)
		fprintf(stderr, "peers_load: %llu of %llu updates acknowledged\n",
			(unsigned long long)acked, (unsigned long long)all);
	printf("RESULT nodes=%d updates=%llu seconds=%.3f updates_per_s=%.0f", nodes,
	       (unsigned long long)acked, secs, acked / secs);
	if (master)
		printf(" cpu_us_per_update=%.3f",
		       (double)(cpu1 - cpu0) / (double)sysconf(_SC_CLK_TCK) * 1e6 / (double)acked);
	printf(" pushes=%llu sums_right=%u/%u", (unsigned long long)pushes, right, keys);
	double events0 = 0;
	for (int i = 0; i < nodes; i++)
		events0 += ns[i].curr[0];
	printf(" key0_pushed=%.0f key0_events=%.0f\n", ns[0].pushed[0], events0);
	return acked == all && right == keys ? 0 : 1;
}
