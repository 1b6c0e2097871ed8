/*
 * port.h - loopback ports for the servers the tests start (the agent,
 * redis-server, postgres): one the kernel hands out, free a moment ago.
 * Another process may take it before the server binds: the starters
 * retry other ports when a server exits early. (Inline, as clock.h: the
 * benchmarks link some fixtures without the rest of tests/lib.)
 */
#ifndef TESTS_PORT_H
#define TESTS_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A TCP socket (close-on-exec) and *sa set to 127.0.0.1:port: returns
 * the socket, or -1. */
static inline int test_loopback_socket(struct sockaddr_in *sa, int port)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

/* Binds 127.0.0.1:want (0: a port the kernel picks) a moment and closes:
 * returns the port, or -1 if it could not be bound. */
static inline int test_port(int want)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int fd = test_loopback_socket(&sa, want), port = -1;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

#endif /* TESTS_PORT_H */
