"""The controller runtime shared by every component: what a long-running Kubernetes
process needs, apart from what kube-offload decides.

- the API edge: :mod:`.kube` (client loading, raw-JSON calls, one error type);
- caches: :mod:`.informer` (paginated list, resumable watch, indexers, timed resync),
  :mod:`.indexer` (its store and named indexes) and :mod:`.namespaced_informer` (one kind
  over a changing set of namespaces);
- loops: :mod:`.workqueue` (de-duplicating, rate-limited, delayed adds), :mod:`.controller`
  (workers over a queue), :mod:`.predicates` (updates a loop may skip: status only),
  :mod:`.events` (the Event recorder), :mod:`.leader_election`;
- serving and watching, two HTTP stacks (docs/runtime.md, "Serving HTTP: two stacks"):
  the admission path of the webhook and the extender, :mod:`.serving` (gunicorn, the
  server settings and flags), :mod:`.asyncio_worker` and :mod:`.http11` (the worker),
  :mod:`.wsgi` (the app without a framework), :mod:`.workers`, :mod:`.http_metrics`,
  :mod:`.body_limit`; the in-process servers and streams, :mod:`.https_server`,
  :mod:`.health` (``/healthz``, ``/readyz``, ``/metrics``) and :mod:`.http_handler`; every
  server's probe answers, :mod:`.probes`; :mod:`.metrics` (queues, reconciles, API calls),
  :mod:`.gcpause`;
- process plumbing: :mod:`.flags` (flags with environment twins), :mod:`.logs`.

The domain modules (policy, selector, affinity, resources, capacity, shadowpod, ...) stay
in :mod:`kube_offload` and do no I/O; docs/runtime.md describes the runtime.
"""
