"""Resource reflection (loop 8 of ARCHITECTURE.md): ConfigMaps, Secrets, Services,
EndpointSlices, Ingresses, PersistentVolumeClaims and service-account tokens copied from
every namespace offloaded to this remote cluster into its twin namespace, the local copy
always the source of truth; Events of offloaded pods copied back from the remote cluster.

Layout: ``forge/`` builds every desired object (pure, tested on its own): what every
kind shares in ``forge/__init__.py``, each kind's own in ``forge/<kind>.py``, named as the
kind's module here; ``reflector.py`` is the one generic reconcile loop, reading through
``caches.py`` (the shared informers, our remote objects' selector and index) and writing
through ``remote_ops.py``; one small module per reflected kind says what differs;
``loops.py`` turns the settings into the runner's loop factories.
docs/reflection.md is the user's view.
"""
