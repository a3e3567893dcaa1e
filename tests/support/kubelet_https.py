"""Calling a kubelet API server the tests start on 127.0.0.1 with a throwaway serving
certificate: TLS without verification, as an API server without
--kubelet-certificate-authority does."""

from __future__ import annotations

import http.client
import ssl
from typing import Any


def get(srv: Any, path: str, method: str = "GET", token: str = "admin-token") -> tuple[http.client.HTTPResponse, bytes]:
    """``method path`` on ``srv`` (a started KubeletHTTPServer) as bearer ``token``: the
    response and its whole body."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", srv.server_address[1], context=context, timeout=10)
    conn.request(method, path, headers={"Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response, body
