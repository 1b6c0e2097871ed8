# slow_app.py PORT - an app for the e2e tests of concurrency limits
# (tests/e2e/nginx_concurrency.sh, haproxy_leases.sh): answers "app" to
# each GET after the seconds its query's s= says (0 by default), several
# at once (a thread each); with t=N, an X-Usage-Tokens: N header (what an
# LLM upstream says a request cost: haproxy_llm.sh, nginx_llm.sh).
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        time.sleep(float(q.get("s", ["0"])[0]))
        self.send_response(200)
        if "t" in q:
            self.send_header("X-Usage-Tokens", q["t"][0])
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"app\n")

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
