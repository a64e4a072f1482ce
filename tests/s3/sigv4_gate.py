#!/usr/bin/python3
"""A front for s3rver that checks AWS Signature V4, which s3rver 3.7 does not (it checks
only that the access key exists). Every request's signature is computed again with the
signer of Debian's aws CLI (its vendored botocore), independently of libcurl: a mismatch is
answered 403 SignatureDoesNotMatch, as S3 would; a match is passed on to s3rver and its
answer back. A signed payload hash (anything but UNSIGNED-PAYLOAD) must be the body's.

usage: sigv4_gate.py PORT UPSTREAM_PORT ACCESS_KEY SECRET REGION
"""
import hashlib
import http.client
import http.server
import re
import sys

import awscli  # noqa: F401  (puts Debian's vendored botocore on the import path)
import botocore.auth
import botocore.awsrequest
import botocore.credentials

PORT, UPSTREAM, KEY, SECRET, REGION = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                       sys.argv[4], sys.argv[5])
AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/s3/aws4_request,"
                  r" ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})")


class Gate(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def verify(self, body):
        m = AUTH.fullmatch(self.headers.get("Authorization", ""))
        if not m:
            return "no SigV4 Authorization header"
        key, _, region, signed, signature = m.groups()
        if key != KEY or region != REGION:
            return "wrong key or region"
        names = signed.split(";")
        if "host" not in names or "x-amz-date" not in names:
            return "host and x-amz-date must be signed"
        if any(self.headers.get(n) is None for n in names):
            return "a signed header is missing"
        claimed = self.headers.get("x-amz-content-sha256")
        if claimed is None:
            return "no x-amz-content-sha256"
        if claimed != "UNSIGNED-PAYLOAD" and claimed != hashlib.sha256(body).hexdigest():
            return "x-amz-content-sha256 is not the body's"
        request = botocore.awsrequest.AWSRequest(
            method=self.command, url="http://" + self.headers["Host"] + self.path,
            headers={n: self.headers[n] for n in names}, data=body)
        request.context["timestamp"] = self.headers["X-Amz-Date"]
        auth = botocore.auth.S3SigV4Auth(botocore.credentials.Credentials(KEY, SECRET), "s3",
                                         REGION)
        expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)),
                                  request)
        return None if expected == signature else "signature differs"

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        why = self.verify(body)
        if why:
            answer = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch"
                      "</Code><Message>" + why + "</Message></Error>").encode()
            self.send_response(403)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            return
        up = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
        up.request(self.command, self.path, body=body or None, headers=headers)
        r = up.getresponse()
        data = r.read()
        self.send_response(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() not in ("content-length", "connection", "transfer-encoding", "date"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        up.close()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = handle_any


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Gate).serve_forever()
