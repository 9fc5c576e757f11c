#!/usr/bin/env python3
"""A local stand-in of Planetary Computer's SAS token API, in front of Azurite (the real
service cannot be reached from here): `pc_token_api.py PORT LIFETIME_SECS LOG`.

GET /api/sas/v1/token/{account}/{container} answers {"msft:expiry", "token"} with a real
container SAS for Azurite's devstoreaccount1 (read + list) valid LIFETIME_SECS, except, by
request number: 1 -> 429 "Try again in 1 seconds" with Retry-After: 1; 3 -> a token
that has already expired; 4 -> a valid token after a 2 s stall. Every answer is appended
to LOG as "n elapsed_s status expiry" (never the token)."""
import datetime
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from azure.storage.blob import ContainerSasPermissions, generate_container_sas

KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
port, lifetime, log_path = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
started = time.monotonic()
lock = threading.Lock()
count = [0]


def log(n, status, expiry):
    with lock, open(log_path, "a") as f:
        f.write(f"{n} {time.monotonic() - started:.2f} {status} {expiry}\n")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        parts = self.path.strip("/").split("/")
        if len(parts) != 6 or parts[:4] != ["api", "sas", "v1", "token"]:
            self.send_error(404)
            return
        account, container = parts[4], parts[5]
        with lock:
            count[0] += 1
            n = count[0]
        if n == 1:
            body = b'{"detail": "Rate limit is exceeded. Try again in 1 seconds."}'
            self.send_response(429)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            log(n, 429, "-")
            return
        if n == 4:
            time.sleep(2)
        now = datetime.datetime.now(datetime.timezone.utc)
        expiry = now - datetime.timedelta(seconds=60) if n == 3 else now + datetime.timedelta(seconds=lifetime)
        token = generate_container_sas(
            account_name=account, container_name=container, account_key=KEY,
            permission=ContainerSasPermissions(read=True, list=True),
            start=now - datetime.timedelta(seconds=300), expiry=expiry,
        )
        body = json.dumps({"msft:expiry": expiry.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "token": token}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        log(n, 200, expiry.isoformat())


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
