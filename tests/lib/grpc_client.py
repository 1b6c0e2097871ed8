#!/usr/bin/python3
# tests/lib/grpc_client.py - a real gRPC client of the agent's gRPC front
# (Debian's python3-grpcio, for /usr/bin/python3), for tests/test_grpc.c:
# the messages are tests/lib/rls_pb.py's (built at run time, no protoc),
# the methods called through grpcio's generic unary_unary.
#
#   grpc_client.py ADDR rls JSON [TIMEOUT_S]     one ShouldRateLimit
#   grpc_client.py ADDR health [SERVICE]         one Health/Check
#   grpc_client.py ADDR raw PATH HEX [TIMEOUT_S] any method, bytes as hex
#                                                (@N: N zero bytes)
#   grpc_client.py ADDR burst N JSON             N ShouldRateLimit at once on one channel
#   grpc_client.py ADDR reload N PID             N Health/Check one after the
#                                                other, SIGHUP to PID at N/3 and 2N/3
# A call prints "OK <response as JSON>" or "ERR <STATUS> <details>"; burst
# and reload print counts: "ok=N over=N err=N [first error]".
import json
import os
import signal
import sys
from concurrent import futures  # noqa: F401 (grpc's futures)

import grpc
from google.protobuf import json_format

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rls_pb  # noqa: E402

RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH = "/grpc.health.v1.Health/Check"


def method(ch, path, req, resp):
    return ch.unary_unary(path, request_serializer=req.SerializeToString,
                          response_deserializer=resp.FromString)


def show(m):
    return json.dumps(json_format.MessageToDict(m, preserving_proto_field_name=True),
                      sort_keys=True, separators=(",", ":"))


def call(fn, msg, timeout):
    try:
        print("OK " + show(fn(msg, timeout=timeout)))
    except grpc.RpcError as e:
        print("ERR %s %s" % (e.code().name, e.details()))


def main():
    addr, what = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    ch = grpc.insecure_channel(addr)
    Req, Resp = rls_pb.cls("request"), rls_pb.cls("response")
    HReq, HResp = rls_pb.cls("health_request"), rls_pb.cls("health_response")
    if what == "rls":
        call(method(ch, RLS, Req, Resp), json_format.ParseDict(json.loads(args[0]), Req()),
             float(args[1]) if len(args) > 1 else 10)
    elif what == "health":
        call(method(ch, HEALTH, HReq, HResp), HReq(service=args[0] if args else ""), 10)
    elif what == "raw":
        fn = ch.unary_unary(args[0], request_serializer=lambda b: b,
                            response_deserializer=lambda b: b)
        try:
            msg = b"\0" * int(args[1][1:]) if args[1][0] == "@" else bytes.fromhex(args[1])
            print("OK " + fn(msg,
                             timeout=float(args[2]) if len(args) > 2 else 10).hex())
        except grpc.RpcError as e:
            print("ERR %s %s" % (e.code().name, e.details()))
    elif what == "burst":
        fn = method(ch, RLS, Req, Resp)
        msg = json_format.ParseDict(json.loads(args[1]), Req())
        calls = [fn.future(msg, timeout=60) for _ in range(int(args[0]))]
        ok = over = err = 0
        first = ""
        for f in calls:
            try:
                r = f.result()
                if r.overall_code == 2:
                    over += 1
                else:
                    ok += 1
            except grpc.RpcError as e:
                err += 1
                first = first or "%s %s" % (e.code().name, e.details())
        print("ok=%d over=%d err=%d %s" % (ok, over, err, first))
    elif what == "reload":
        fn = method(ch, HEALTH, HReq, HResp)
        n, pid = int(args[0]), int(args[1])
        ok = err = 0
        first = ""
        for i in range(n):
            if i in (n // 3, 2 * n // 3):
                os.kill(pid, signal.SIGHUP)
            try:
                fn(HReq(), timeout=10)
                ok += 1
            except grpc.RpcError as e:
                err += 1
                first = first or "%s %s" % (e.code().name, e.details())
        print("ok=%d over=0 err=%d %s" % (ok, err, first))
    ch.close()


if __name__ == "__main__":
    main()
