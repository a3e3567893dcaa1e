"""Resource reflection (loop 8 of ARCHITECTURE.md): ConfigMaps, Secrets, Services,
EndpointSlices, Ingresses, PersistentVolumeClaims and service-account tokens copied from
every namespace offloaded to this remote cluster into its twin namespace, the local copy
always the source of truth; Events of offloaded pods copied back from the remote cluster.

Layout: one module per reflected kind holds its forge (the desired object, pure, tested
on its own) and its reflector (what differs from the generic loop); ``forge/`` keeps
only what the kinds share (metadata, ownership, the Event helpers of both Event
reflectors); ``reflector.py`` is the one generic reconcile loop, reading through
``caches.py`` (the shared informers, our remote objects' selector and index) and writing
through ``remote_ops.py`` (server-side apply) with ``applied.py`` (what was applied);
``loops.py`` turns the settings into the runner's loop factories. The two reflectors of
remote Events (``events.py`` for offloaded pods, ``object_events.py`` for Services,
claims and Ingresses) share ``event_copies.py``: the aggregate a local Event stands for,
its forge, and the ledger of their budgets.
docs/reflection.md is the user's view.
"""
