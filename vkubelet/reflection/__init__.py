"""Resource reflection (loop 8 of ARCHITECTURE.md): ConfigMaps, Secrets, Services,
EndpointSlices, Ingresses, PersistentVolumeClaims and service-account tokens copied from
every namespace offloaded to this remote cluster into its twin namespace, the local copy
always the source of truth; Events of offloaded pods copied back from the remote cluster.

Layout: ``forge.py`` builds every desired object (pure, tested on its own);
``reflector.py`` is the one generic reconcile loop; one small module per reflected kind
says what differs; ``loops.py`` turns the settings into the runner's loop factories.
docs/reflection.md is the user's view.
"""
