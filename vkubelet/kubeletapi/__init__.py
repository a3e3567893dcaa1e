"""The kubelet API of the virtual node: what makes ``kubectl logs``, ``exec``,
``attach``, ``cp`` and ``port-forward`` work on an offloaded pod.

The local kube-apiserver reaches a node's kubelet over HTTPS at the address and port the
node publishes; the virtual kubelet answers there and relays each request to the remote
cluster's API server (``pods/log``, ``exec``, ``attach``, ``portforward``) for the pod's remote
twin. Every request is first authenticated and authorized as a kubelet in webhook mode
does it. Modules:

* ``access``    - the gate in front of every request (401 / 403 / 500);
* ``authn``     - client certificate, bearer token (TokenReview) or anonymous;
* ``authz``     - path and method -> node attributes (pure), SubjectAccessReview;
* ``decision_cache`` - the bounded TTL cache of both reviews;
* ``paths``     - kubelet URL paths, parsed (pure);
* ``resolver``  - local pod -> the remote pod our ShadowPod owns in our twin namespace;
* ``logs``      - the containerLogs endpoint: query -> remote pods/log query, and the
  streaming relay;
* ``websocket`` - WebSocket hops on wsproto (handshake, messages, close);
* ``remote``    - a connection of our own to the remote API server per stream;
* ``streams``   - exec/attach/port-forward options and the relays (WebSocket, SPDY);
* ``upgrades``  - the exec/attach/port-forward endpoints: the HTTP request that becomes a
  stream (WebSocket accepted, SPDY forwarded);
* ``limits``    - caps on connections and streams, idle and connect timeouts;
* ``tls``       - the serving certificate (given, or generated at start-up);
* ``server``    - the threaded HTTPS server (the connection cap, shutdown of long-lived
  requests) and the state the endpoints share;
* ``handler``   - the request handler: admission, dispatch by endpoint, error answers;
* ``loop``      - plugs it all into the virtual kubelet as a loop (and declares the
  node's WebSocket feature).

See docs/logs-and-exec.md.
"""
