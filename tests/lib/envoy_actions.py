#!/usr/bin/python3
# tests/lib/envoy_actions.py - what Envoy's HTTP rate limit filter would ask
# for one request, read from an envoy.yaml (tests/e2e/envoy_example.sh, on
# docs/envoy-example/envoy.yaml): the first route of the first virtual host
# whose prefix matches, each of its rate_limits a descriptor of the
# actions remote_address, request_headers (skip_if_absent),
# generic_key and header_value_match (exact string_match, expect_match),
# as Envoy's source (router_ratelimit.cc) makes them: a descriptor an action
# cannot produce is left out, an action skipped (skip_if_absent) adds no
# entry, a descriptor without entries is not sent. No Envoy binary runs here (Debian
# has none): this is its part of the example's test.
#
#   envoy_actions.py ENVOY_YAML METHOD PATH CLIENT_ADDR [NAME=VALUE ...]
#
# prints the RateLimitRequest as JSON (tests/lib/grpc_client.py's input), or
# "none" when Envoy would not call the service (no descriptor);
#
#   envoy_actions.py ENVOY_YAML settings
#
# prints the filter's and the service cluster's settings, one line:
# "domain=D transport=V3 failure_mode_deny=False x_headers=OFF port=P h2=True".
import json
import sys

import yaml


def manager(cfg):
    for lst in cfg["static_resources"]["listeners"]:
        for chain in lst["filter_chains"]:
            for f in chain["filters"]:
                if f["name"] == "envoy.filters.network.http_connection_manager":
                    return f["typed_config"]
    raise SystemExit("no http_connection_manager")


def entry(action, method, addr, headers):
    """The entries an action adds ([] when skipped), or None: no descriptor."""
    kind, a = next(iter(action.items()))
    if kind == "remote_address":
        return [("remote_address", addr)]
    if kind == "generic_key":
        return [(a.get("descriptor_key", "generic_key"), a["descriptor_value"])]
    if kind == "request_headers":
        v = headers.get(a["header_name"].lower())
        if v is None:
            return [] if a.get("skip_if_absent", False) else None
        return [(a["descriptor_key"], v)]
    if kind == "header_value_match":
        req = dict(headers, **{":method": method})
        hit = all(req.get(h["name"].lower()) == h["string_match"]["exact"] for h in a["headers"])
        if hit != a.get("expect_match", True):
            return None
        return [(a.get("descriptor_key", "header_match"), a["descriptor_value"])]
    raise SystemExit("action %s is not read here" % kind)


def settings(cfg, rl):
    svc = rl["rate_limit_service"]
    name = svc["grpc_service"]["envoy_grpc"]["cluster_name"]
    k = next(c for c in cfg["static_resources"]["clusters"] if c["name"] == name)
    ep = k["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    print("domain=%s transport=%s failure_mode_deny=%s x_headers=%s port=%s h2=%s" % (
        rl["domain"], svc["transport_api_version"], rl.get("failure_mode_deny", False),
        rl.get("enable_x_ratelimit_headers", "OFF"), ep["address"]["socket_address"]["port_value"],
        "http2_protocol_options" in str(k.get("typed_extension_protocol_options"))))


def main():
    cfg = yaml.safe_load(open(sys.argv[1]))
    hcm = manager(cfg)
    rl = next(f["typed_config"] for f in hcm["http_filters"]
              if f["name"] == "envoy.filters.http.ratelimit")
    if sys.argv[2] == "settings":
        settings(cfg, rl)
        return
    domain = rl["domain"]
    method, path, addr = sys.argv[2], sys.argv[3], sys.argv[4]
    headers = dict(h.split("=", 1) for h in sys.argv[5:])
    headers = {k.lower(): v for k, v in headers.items()}
    route = next(r for r in hcm["route_config"]["virtual_hosts"][0]["routes"]
                 if path.startswith(r["match"]["prefix"]))
    descriptors = []
    for rl in route["route"].get("rate_limits", []):
        made = [entry(a, method, addr, headers) for a in rl["actions"]]
        entries = [kv for m in made if m is not None for kv in m]
        if None not in made and entries:
            descriptors.append({"entries": [{"key": k, "value": v} for k, v in entries]})
    if not descriptors:
        print("none")
        return
    print(json.dumps({"domain": domain, "descriptors": descriptors}, separators=(",", ":")))


if __name__ == "__main__":
    main()
