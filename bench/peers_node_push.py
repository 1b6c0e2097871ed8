#!/usr/bin/env python3
# peers_node_push.py - how fast a HAProxy node pushes an update of a
# tracked table to its peers (docs/CLUSTER.md, "The peers front's bound":
# the node's part of the lag). This script is the node's one peer: it
# answers the hello 200 and the node's 00 00 with 00 01 (docs/PEERS.md),
# sends heartbeats, and times each HTTP request to the node (track-sc0
# src) until an update (0a 80 / 0a 81 / 0a 85) arrives on the session.
# The node: HAProxy, nbthread 1, on free loopback ports; stopped at the end.
#
#   python3 bench/peers_node_push.py HAPROXY_BINARY [SAMPLES (100)]
import random, select, socket, subprocess, sys, tempfile, time, http.client
hb, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100
def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
agg, me, fe = port(), port(), port()
cfg = f"""global
    nbthread 1
    localpeer node1
defaults
    mode http
    timeout connect 1s
    timeout client 10s
    timeout server 10s
peers rl
    peer node1 127.0.0.1:{me}
    peer agg 127.0.0.1:{agg}
    table req_local type ip size 1k expire 10s store http_req_rate(10s)
frontend fe
    bind 127.0.0.1:{fe}
    http-request track-sc0 src table rl/req_local
    http-request return status 200 content-type text/plain string ok
"""
tmp = tempfile.TemporaryDirectory()
path = tmp.name + "/node.cfg"
open(path, "w").write(cfg)
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", agg)); ls.listen(1)
hp = subprocess.Popen([hb, "-db", "-f", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    ls.settimeout(10); c, _ = ls.accept(); c.settimeout(5)
    buf = b""
    while buf.count(b"\n") < 3: buf += c.recv(4096)
    c.sendall(b"200\n")
    time.sleep(0.2); c.setblocking(False)
    try: c.recv(65536)
    except BlockingIOError: pass
    c.sendall(b"\x00\x01")
    time.sleep(0.2)
    def drain():
        got = b""
        while True:
            try:
                d = c.recv(65536)
                if not d: raise SystemExit("node closed")
                got += d
            except BlockingIOError: return got
    drain()
    lags = []
    h = http.client.HTTPConnection("127.0.0.1", fe, timeout=2)
    for k in range(n):
        drain()
        t0 = time.monotonic()
        h.request("GET", "/"); h.getresponse().read()
        got = b""
        while b"\x0a\x80" not in got and b"\x0a\x81" not in got and b"\x0a\x85" not in got and time.monotonic() - t0 < 1:
            select.select([c], [], [], 1)
            got += drain()
        lags.append((time.monotonic() - t0) * 1000)
        c.sendall(b"\x00\x04")
        time.sleep(0.02 + random.random() * 0.08)
    lags.sort()
    print("%s: node push: %d samples: p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (hb, len(lags), lags[len(lags)//2], lags[min(len(lags)-1, int(len(lags)*0.99))], lags[-1]))
finally:
    hp.terminate(); hp.wait()
