"""The answer every small HTTP server of ours writes (the health server and the enforcer's
webhook server; the webhook, extender and kubelet API answer through their own stacks):
status, type, length, no MIME sniffing, body. One place, so a header added for one server
is added for all of them."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


class ResponseWriter(BaseHTTPRequestHandler):
    """A request handler that answers whole bodies (no streaming, no chunking)."""

    def send_body(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        # Browsers reaching a probe port must not guess a type and render the body.
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)
