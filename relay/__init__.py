"""The home API relay (docs/home-api.md): runs on the provider, one Deployment per consumer
in its tenant namespace, and joins an offloaded pod's TCP connection to an *uplink* the
consumer's vkubelet holds open to it through the provider's API server (a port-forward).

It never reads or alters the bytes it passes (TLS runs end to end between the pod and its
home API server) and adds no credential: it only pairs connections. :mod:`relay.pairing`
is the pairing (a FIFO of idle uplinks, a byte pump), :mod:`relay.server` the listening
sockets and threads, :mod:`relay.cli` the ``kube-offload relay`` command.
"""
