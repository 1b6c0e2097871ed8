#!/usr/bin/python3
# tests/lib/h2raw.py - HTTP/2 written frame by frame (RFC 9113, HPACK
# literals without Huffman), for what no well-behaved client sends: the
# hostile peers and the exact moments of tests/test_grpc*.c.
#
#   h2raw.py ADDR drain PID      a Health/Check's headers, SIGTERM to PID,
#                                its GOAWAY, then the message: prints
#                                "goaway=<code> last=<id> data=<hex of DATA>"
#   h2raw.py ADDR block KIB      one header block of KIB KiB in HEADERS and
#                                CONTINUATIONs: "goaway=<code>|none closed=<0|1>"
#   h2raw.py ADDR resets N       N streams opened and reset at once:
#                                "goaway=<code>|none closed=<0|1>"
#   h2raw.py ADDR streams N      N streams opened, none finished:
#                                "refused=<RST_STREAMs received> goaway=<code>|none"
#   h2raw.py ADDR idle           nothing sent: "goaway=<code>|none closed=<0|1>"
#   h2raw.py ADDR partial        a message cut short and left so:
#                                "ended=<1: its stream answered and ended>"
#   h2raw.py ADDR noread N SECS  N Health/Checks sent, none of the answers
#                                read, until the agent stops reading (at
#                                most SECS): "stalled=<0|1> sent=<bytes> of=<bytes>",
#                                then holds the connection 5 s if stalled
#   h2raw.py ADDR calls N TIMEOUT HEX  N ShouldRateLimit calls one after the
#                                other, each with grpc-timeout TIMEOUT (e.g.
#                                200m) and the request HEX (the message, no
#                                prefix), none ended by this client: "ok=N
#                                over=N err=N" (err: answered without a
#                                message, e.g. DEADLINE_EXCEEDED)
import fcntl
import os
import select
import signal
import socket
import struct
import sys
import termios
import time

DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW, CONT = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS, ACK = 1, 4, 1
HEALTH = "/grpc.health.v1.Health/Check"
RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def hint(n, prefix_bits=7):
    top = (1 << prefix_bits) - 1
    if n < top:
        return bytes([n])
    out, n = [top], n - top
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    return bytes(out + [n])


def literal(name, value):
    return b"\x00" + hint(len(name)) + name.encode() + hint(len(value)) + value.encode()


def request_block(path=HEALTH, extra=()):
    hs = [(":method", "POST"), (":scheme", "http"), (":path", path),
          (":authority", "agent"), ("content-type", "application/grpc"), ("te", "trailers")]
    return b"".join(literal(n, v) for n, v in hs + list(extra))


class Conn:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=10)
        self.buf = b""
        self.s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(SETTINGS, 0, 0))

    def send(self, data):
        self.s.sendall(data)

    def read_frame(self, timeout=10):
        """(type, flags, stream, payload), or None once the peer closed."""
        end = time.time() + timeout
        while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
            left = end - time.time()
            if left <= 0 or not select.select([self.s], [], [], left)[0]:
                raise TimeoutError("no frame")
            try:
                got = self.s.recv(65536)
            except ConnectionResetError:
                got = b""
            if not got:
                return None
            self.buf += got
        n = int.from_bytes(self.buf[:3], "big")
        f = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF,
             self.buf[9:9 + n])
        self.buf = self.buf[9 + n:]
        if f[0] == SETTINGS and not f[1] & ACK:
            try:
                self.send(frame(SETTINGS, ACK, 0))
            except OSError:
                pass            # closed already: what it sent is still read
        return f

    def until_close(self, timeout=20):
        """Reads to the end: (GOAWAY error code or None, RST_STREAMs, closed)."""
        code, rst, end = None, 0, time.time() + timeout
        while time.time() < end:
            try:
                f = self.read_frame(end - time.time())
            except TimeoutError:
                return code, rst, False
            if f is None:
                return code, rst, True
            if f[0] == GOAWAY:
                code = int.from_bytes(f[3][4:8], "big")
            elif f[0] == RST:
                rst += 1
        return code, rst, False


def show_code(code):
    return "none" if code is None else str(code)


def main():
    addr, what = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    c = Conn(addr)
    if what == "drain":
        c.send(frame(HEADERS, END_HEADERS, 1, request_block()))
        time.sleep(0.2)
        os.kill(int(args[0]), signal.SIGTERM)
        code = last = None
        while code is None:
            f = c.read_frame()
            if f is None:
                break
            if f[0] == GOAWAY:
                last, code = int.from_bytes(f[3][:4], "big"), int.from_bytes(f[3][4:8], "big")
        c.send(frame(DATA, END_STREAM, 1, b"\x00\x00\x00\x00\x00"))
        data = b""
        while True:
            f = c.read_frame()
            if f is None or (f[0] == HEADERS and f[1] & END_STREAM and f[2] == 1):
                break
            if f[0] == DATA and f[2] == 1:
                data += f[3]
        print("goaway=%s last=%s data=%s" % (show_code(code), last, data.hex()))
    elif what == "block":
        block = request_block(extra=[("x-pad-%d" % i, "a" * 4000) for i in range(int(args[0]) // 4 + 1)])
        chunks = [block[i:i + 16000] for i in range(0, len(block), 16000)]
        try:
            c.send(frame(HEADERS, 0, 1, chunks[0]))
            for i, ch in enumerate(chunks[1:]):
                c.send(frame(CONT, END_HEADERS if i == len(chunks) - 2 else 0, 1, ch))
        except (BrokenPipeError, ConnectionResetError):
            pass
        code, _, closed = c.until_close()
        print("goaway=%s closed=%d" % (show_code(code), closed))
    elif what == "resets":
        out = b"".join(frame(HEADERS, END_HEADERS, 2 * i + 1, request_block()) +
                       frame(RST, 0, 2 * i + 1, struct.pack(">I", 8)) for i in range(int(args[0])))
        try:
            c.send(out)
        except (BrokenPipeError, ConnectionResetError):
            pass
        code, _, closed = c.until_close()
        print("goaway=%s closed=%d" % (show_code(code), closed))
    elif what == "streams":
        n = int(args[0])
        c.send(b"".join(frame(HEADERS, END_HEADERS, 2 * i + 1, request_block()) for i in range(n)))
        code, rst, _ = c.until_close(timeout=3)
        print("refused=%d goaway=%s" % (rst, show_code(code)))
    elif what == "idle":
        code, _, closed = c.until_close()
        print("goaway=%s closed=%d" % (show_code(code), closed))
    elif what == "partial":
        # A message's prefix says 100 bytes; 10 come, then nothing.
        c.send(frame(HEADERS, END_HEADERS, 1, request_block()) +
               frame(DATA, 0, 1, b"\x00\x00\x00\x00\x64" + b"\x00" * 10))
        ended, end = 0, time.time() + 20
        while not ended and time.time() < end:
            f = c.read_frame(end - time.time())
            if f is None:
                break
            ended = int(f[0] == HEADERS and f[2] == 1 and bool(f[1] & END_STREAM))
        print("ended=%d" % ended)
    elif what == "noread":
        # Requests as fast as the socket takes them, no byte read: once
        # the agent stops reading this connection, what the socket holds
        # stops leaving it (its send queue stays put for a second).
        n, secs = int(args[0]), float(args[1])
        out = b"".join(frame(HEADERS, END_HEADERS, 2 * i + 1, request_block()) +
                       frame(DATA, END_STREAM, 2 * i + 1, b"\x00" * 5) for i in range(n))
        c.s.setblocking(False)
        off, end, stalled, last, since = 0, time.time() + secs, 0, -1, time.time()
        while time.time() < end and off < len(out):
            try:
                off += c.s.send(out[off:off + 65536])
                continue
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                break
            q = struct.unpack("i", fcntl.ioctl(c.s, termios.TIOCOUTQ, b"\0" * 4))[0]
            if q != last:
                last, since = q, time.time()
            elif time.time() - since >= 1.0:
                stalled = 1
                break
            time.sleep(0.05)
        print("stalled=%d sent=%d of=%d" % (stalled, off, len(out)), flush=True)
        time.sleep(5 if stalled else 0)
    elif what == "calls":
        n, timeout, msg = int(args[0]), args[1], bytes.fromhex(args[2])
        body = b"\x00" + struct.pack(">I", len(msg)) + msg
        ok = over = err = 0
        for i in range(n):
            sid = 2 * i + 1
            block = request_block(RLS, [("grpc-timeout", timeout)])
            c.send(frame(HEADERS, END_HEADERS, sid, block) + frame(DATA, END_STREAM, sid, body))
            data = b""
            while True:
                f = c.read_frame(30)
                if f is None:
                    break
                if f[0] == DATA and f[2] == sid:
                    data += f[3]
                if f[2] == sid and f[0] in (HEADERS, RST) and (f[1] & END_STREAM or f[0] == RST):
                    break
            # RateLimitResponse: overall_code (field 1, varint) first.
            if len(data) > 6 and data[5] == 0x08:
                ok, over = ok + (data[6] == 1), over + (data[6] == 2)
            else:
                err += 1
        print("ok=%d over=%d err=%d" % (ok, over, err))
    c.s.close()


if __name__ == "__main__":
    main()
