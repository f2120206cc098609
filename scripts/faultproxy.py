#!/usr/bin/env python3
"""faultproxy.py - a fault-injecting HTTP/1.1 proxy for coven's storage tests (stdlib only).

    faultproxy.py --upstream http://127.0.0.1:9000 [--port 0] [--port-file F] [--control F]
                  [--stats F] [--log F] [--parent-pid PID] [--timeout SECONDS]

Listens on 127.0.0.1:PORT (0 = a free port, written to --port-file and to stderr) and forwards
every request to the upstream S3 endpoint with the same method, path, query, headers and body.
The Host header is forwarded unchanged: the client signs for the proxy's host:port (it uses the
proxy URL as its endpoint), and the upstream verifies SigV4 against the Host it receives, so
signatures still match (checked with start-s3-server's launcher and SeaweedFS).

Faults are rules, set by writing JSON to the --control file (re-read when it changes; every new
content resets the counters) or by `POST /__fault` with the JSON as body. `GET /__stats` answers
the counters (requests, faults, body bytes, client connections accepted), also written to --stats
after every request. A rule, or {"rules": [rule, ...]}:

    {"mode": "status", "status": 500, "count": 2}        answer 500 (S3 XML error body) twice
    {"mode": "status", "status": 503, "retry_after": 1}   503 SlowDown with Retry-After: 1
    {"mode": "reset", "after_bytes": 65536}               forward, send headers and that many body
                                                          bytes, then reset the connection (RST)
    {"mode": "stall", "seconds": 10, "after_bytes": 0}    forward, send headers and that many
                                                          body bytes, then go silent
    {"mode": "ignore_range"}                              a server that ignores Range: a ranged GET is
                                                          forwarded as it is (so its signature is
                                                          checked) and a 206 answer is replaced by
                                                          200 with the whole object, as the proxy saw
                                                          it PUT (single PUTs up to 16 MiB)
    {"mode": "short_range", "after_bytes": 1000}          a 206 answer cut to its first bytes, its
                                                          Content-Range and Content-Length rewritten to
                                                          match (bytes a-(a+999)/total): short, but
                                                          self-consistent, as some servers and caches
                                                          answer a range they serve only in part
    {"mode": "none"} or {}                                no faults

    {"mode": "reset", "before": true}                      read the request, forward nothing, reset
    {"mode": "stall", "seconds": 10, "before": true}      read the request, forward nothing, go silent
                                                          (for requests whose answer has no body)

Optional in every rule: "method": "GET" and "path": "substring" to match only some requests;
"skip": N lets the first N matching requests through untouched (default 0);
"count": N faults (default 1; -1 = every matching request). "after_bytes" defaults to half the
body, at most 64 KiB.

With --log F, every request is appended to F as one line: METHOD PATH?QUERY BODY-BYTES ACTION
(ACTION: forwarded, or the injected mode), so tests can count what reached the provider.
The counters include "body_bytes": the response body bytes sent to clients (what a reader
transferred), so a test or benchmark can check that a ranged read fetched only its chunks.

Bounded: exits after --timeout seconds (default 600) and as soon as --parent-pid is gone.
"""
import argparse
import http.client
import http.server
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
    "transfer-encoding", "upgrade", "expect",
}


class Faults:
    """The rules in force and the counters, shared by the handler threads."""

    def __init__(self, control_path, stats_path, log_path=None):
        self.lock = threading.Lock()
        # Held from the look at the control file to the new rules being in force: requests
        # arriving together after a change would each read it and reset the rules' counts (a
        # rule of count 1 then faulted two or three of them).
        self.reload_lock = threading.Lock()
        # Held from the snapshot to the rename, so an older count never replaces a newer one.
        self.write_lock = threading.Lock()
        self.log_path = log_path
        self.rules = []
        self.control_path = control_path
        self.stats_path = stats_path
        self.control_stamp = None
        self.stats = {"requests": 0, "forwarded": 0, "injected": 0, "status": 0, "reset": 0, "stall": 0,
                      "ignore_range": 0, "short_range": 0, "body_bytes": 0, "connections": 0}
        self.objects = {}  # path -> bytes of single PUTs up to 16 MiB, for ignore_range

    def set(self, spec):
        rules = spec.get("rules", [spec]) if isinstance(spec, dict) else list(spec)
        cleaned = []
        for rule in rules:
            mode = rule.get("mode", "none")
            if mode == "none":
                continue
            if mode not in ("status", "reset", "stall", "ignore_range", "short_range"):
                raise ValueError("unknown mode %r" % mode)
            rule = dict(rule)
            rule["remaining"] = int(rule.get("count", 1))
            rule["to_skip"] = int(rule.get("skip", 0))
            cleaned.append(rule)
        with self.lock:
            self.rules = cleaned

    def reload(self):
        if not self.control_path:
            return
        with self.reload_lock:
            self.reload_locked()

    def reload_locked(self):
        try:
            st = os.stat(self.control_path)
        except FileNotFoundError:
            return
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self.control_stamp:
            return
        try:
            with open(self.control_path, "rb") as f:
                spec = json.loads(f.read() or b"{}")
            self.set(spec)
            self.control_stamp = stamp
        except (OSError, ValueError) as e:
            log("cannot read control file: %s" % e)

    def take(self, method, path):
        self.reload()
        with self.lock:
            self.stats["requests"] += 1
            for rule in self.rules:
                if rule["remaining"] == 0:
                    continue
                if rule.get("method") and rule["method"].upper() != method:
                    continue
                if rule.get("path") and rule["path"] not in path:
                    continue
                if rule["to_skip"] > 0:
                    rule["to_skip"] -= 1
                    continue
                if rule["remaining"] > 0:
                    rule["remaining"] -= 1
                self.stats["injected"] += 1
                self.stats[rule["mode"]] += 1
                return dict(rule)
            self.stats["forwarded"] += 1
            return None

    def log_request(self, method, path, size, action):
        if not self.log_path:
            return
        with self.lock:
            with open(self.log_path, "a") as f:
                f.write("%s %s %d %s\n" % (method, path, size, action))

    def count_connection(self):
        with self.lock:
            self.stats["connections"] += 1

    def count_body(self, count):
        with self.lock:
            self.stats["body_bytes"] += count

    def snapshot(self):
        with self.lock:
            return dict(self.stats)

    def write_stats(self):
        if not self.stats_path:
            return
        with self.write_lock:
            data = json.dumps(self.snapshot()).encode()
            tmp = "%s.%d.tmp" % (self.stats_path, threading.get_ident())
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.stats_path)


def log(message):
    sys.stderr.write("faultproxy: %s\n" % message)
    sys.stderr.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "faultproxy"
    faults = None
    upstream = None  # (host, port)

    def log_message(self, fmt, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        # A client connection accepted (its requests follow on it while it is kept alive).
        self.faults.count_connection()

    def do_GET(self):
        self.proxy()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_plain(self, status, body, extra=()):
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def proxy(self):
        body = self.read_body()
        if self.path.startswith("/__fault"):
            try:
                self.faults.set(json.loads(body or b"{}"))
                self.faults.control_stamp = None
                self.send_plain(200, b'{"ok":true}')
            except ValueError as e:
                self.send_plain(400, json.dumps({"error": str(e)}).encode())
            return
        if self.path.startswith("/__stats"):
            self.send_plain(200, json.dumps(self.faults.snapshot()).encode())
            return
        rule = self.faults.take(self.command, self.path)
        self.faults.log_request(self.command, self.path, len(body), rule["mode"] if rule else "forwarded")
        # The counters are on disk before any answer goes (a client reads them once answered).
        self.faults.write_stats()
        try:
            if rule and rule["mode"] == "status":
                self.inject_status(rule)
            elif rule and rule.get("before"):
                self.fail_before(rule)
            else:
                self.forward(body, rule)
        finally:
            self.faults.write_stats()

    def inject_status(self, rule):
        status = int(rule.get("status", 500))
        code = {503: "SlowDown", 429: "TooManyRequests", 500: "InternalError"}.get(status, "InjectedFault")
        xml = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
               '<Message>injected by faultproxy</Message></Error>' % code).encode()
        extra = []
        if "retry_after" in rule:
            extra.append(("Retry-After", str(rule["retry_after"])))
        self.send_plain(status, xml, extra)

    def fail_before(self, rule):
        if rule["mode"] == "stall":
            time.sleep(min(float(rule.get("seconds", 10)), 300))
            self.close_connection = True
            return
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def forward(self, body, rule):
        host, port = self.upstream
        conn = http.client.HTTPConnection(host, port, timeout=120)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() in HOP_BY_HOP or name.lower() == "content-length":
                    continue
                conn.putheader(name, value)
            if body or self.command in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body if body else None)
            response = conn.getresponse()
            data = b"" if self.command == "HEAD" else response.read()
            status, reason = response.status, response.reason
            path = self.path.split("?")[0]
            if self.command == "PUT" and status == 200 and "?" not in self.path and len(body) <= 16 << 20:
                with self.faults.lock:
                    self.faults.objects[path] = body
            whole = None
            if rule is not None and rule["mode"] == "ignore_range" and status == 206:
                with self.faults.lock:
                    whole = self.faults.objects.get(path)
                if whole is not None:
                    data, status, reason = whole, 200, "OK"
            short_range = None
            if rule is not None and rule["mode"] == "short_range" and status == 206:
                spec = response.getheader("Content-Range", "")  # bytes a-b/total
                try:
                    first = int(spec.split(" ")[-1].split("-")[0])
                    total = spec.split("/")[-1]
                except ValueError:
                    first, total = None, None
                after = rule.get("after_bytes")
                after = min(len(data) // 2, 65536) if after is None else max(1, min(int(after), len(data)))
                if first is not None and after < len(data):
                    data = data[:after]
                    short_range = "bytes %d-%d/%s" % (first, first + after - 1, total)
            self.send_response_only(status, reason)
            for name, value in response.getheaders():
                if name.lower() in HOP_BY_HOP or name.lower() == "content-length":
                    continue
                if whole is not None and name.lower() == "content-range":
                    continue
                if short_range is not None and name.lower() == "content-range":
                    value = short_range
                self.send_header(name, value)
            if self.command == "HEAD":
                self.send_header("Content-Length", response.getheader("Content-Length", "0"))
            else:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            # Counted, and the counters written, before the body goes: a client that has the
            # bytes reads counters that include them (counted after, a test reading them as
            # soon as its read returned saw the count of before).
            if rule is None or rule["mode"] in ("ignore_range", "short_range"):
                self.faults.count_body(len(data))
                self.faults.write_stats()
                self.wfile.write(data)
                self.wfile.flush()
                return
            after = rule.get("after_bytes")
            after = min(len(data) // 2, 65536) if after is None else max(0, min(int(after), len(data)))
            self.faults.count_body(after)
            self.faults.write_stats()
            self.wfile.write(data[:after])
            self.wfile.flush()
            if rule["mode"] == "stall":
                time.sleep(min(float(rule.get("seconds", 10)), 300))
                self.close_connection = True
                return
            # reset: abortive close, the peer sees ECONNRESET
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
        finally:
            conn.close()

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, BrokenPipeError, OSError, ValueError):
            pass

    def finish(self):
        try:
            super().finish()
        except (ConnectionError, BrokenPipeError, OSError, ValueError):
            pass


def main():
    parser = argparse.ArgumentParser(description="fault-injecting HTTP proxy for storage tests")
    parser.add_argument("--upstream", required=True, help="http://host:port of the real S3 endpoint")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--control")
    parser.add_argument("--stats")
    parser.add_argument("--log")
    parser.add_argument("--parent-pid", type=int)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()

    target = urllib.parse.urlsplit(args.upstream)
    if target.scheme != "http" or not target.hostname:
        parser.error("--upstream must be http://host:port")
    Handler.upstream = (target.hostname, target.port or 80)
    Handler.faults = Faults(args.control, args.stats, args.log)

    # A listen queue of 5 (socketserver's default) drops the connections past it that arrive
    # together (eight storage workers starting at once), and their clients try again after 1 s,
    # then 3 s, 7 s: a file held back behind nothing.
    http.server.ThreadingHTTPServer.request_queue_size = 128
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    log("listening on 127.0.0.1:%d, forwarding to %s" % (port, args.upstream))

    deadline = time.monotonic() + args.timeout

    def watchdog():
        while True:
            time.sleep(0.5)
            if time.monotonic() > deadline:
                log("timeout reached, exiting")
                os._exit(0)
            if args.parent_pid:
                try:
                    os.kill(args.parent_pid, 0)
                except ProcessLookupError:
                    log("parent %d is gone, exiting" % args.parent_pid)
                    os._exit(0)
                except PermissionError:
                    pass

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
