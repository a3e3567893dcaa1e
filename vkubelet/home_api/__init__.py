"""Home API server access for offloaded pods (docs/home-api.md).

An offloaded pod's in-cluster configuration reaches its **home** API server: the pod
connects to the consumer's relay Service in its tenant namespace on the provider
(`HomeAPIEndpoint`), the relay pairs the connection with an uplink the vkubelet holds open
through the provider's API server (a port-forward), and the vkubelet pipes it to the home
API server. TLS runs end to end between the pod and its home API server; nobody on the
path adds a credential.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HomeAPIEndpoint:
    """Where offloaded pods of one remote cluster reach the relay: the ClusterIP and port
    of the consumer's relay Service on the provider (constants.HOME_API_SERVICE)."""

    ip: str
    port: int
