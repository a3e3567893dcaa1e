"""The gateway's loop: its key, its ConfigMap, its node's kernel (docs/networking.md).

Every ``resync`` seconds (and at once at start) the gateway

1. reads its Secret (``kube-offload peer`` made it empty); without a private key it makes
   one (keys.py) and writes it there, the only place it is ever kept, with the Secret's
   resourceVersion as precondition (two replicas never make two keys);
2. publishes the public key in its ConfigMap (``publicKey``), where ``peer`` reads it for
   the other side, and nothing else of the key;
3. reads the rest of that ConfigMap (CIDRs, the peer's public key and endpoint, written by
   ``peer``) and converges the node on it (engine.py).

It runs in its node's network namespace (hostNetwork): the node is the way into the
tunnel for every pod of the cluster (routes.py brings the other nodes' packets). On SIGTERM
it removes the link and its rules: a gateway that is gone leaves nothing on the node, and
its replacement (possibly on another node) makes them again from the same key and
ConfigMap, so a restart needs nothing done by hand.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from gateway import dataplane as dp
from gateway import keys
from gateway.engine import Engine, EngineError
from kube_offload import constants as c
from kube_offload import fabric as f
from kube_offload.runtime import kinds
from kube_offload.runtime.kube import ApiError, Kube

log = logging.getLogger("kube_offload.gateway")


@dataclass(frozen=True)
class GatewaySettings:
    namespace: str
    config_map: str
    key_secret: str
    interface: str
    listen_port: int
    resync: float = 5.0
    # On a provider: the consumer whose pods alone may use the link (their real addresses,
    # found by the labels only the enforcer writes); "": every pod (the consumer's side).
    allow_pods_of: str = ""


class Gateway:
    def __init__(self, kube: Kube, engine: Engine, settings: GatewaySettings) -> None:
        self.kube = kube
        self.engine = engine
        self.settings = settings
        self.problem: str | None = "not reconciled yet"
        self.public_key = ""
        self.has_peer = False  # Ready without one: peer hands over the keys once both sides are up
        self._said: str | None = None

    # --- one pass --------------------------------------------------------------------------
    def private_key(self) -> str:
        s = self.settings
        secret = self.kube.get_or_none(kinds.SECRETS, s.key_secret, namespace=s.namespace)
        if secret is None:
            raise f.FabricError(f"Secret {s.namespace}/{s.key_secret} does not exist: `kube-offload peer --gateway` "
                                "makes it (empty; the gateway writes its key into it)")
        encoded = (secret.get("data") or {}).get(f.PRIVATE_KEY)
        if encoded:
            return base64.b64decode(encoded).decode().strip()
        private = keys.generate_private_key()
        secret["data"] = {**(secret.get("data") or {}), f.PRIVATE_KEY: base64.b64encode(private.encode()).decode()}
        # replace carries the resourceVersion read: a second replica racing us gets a
        # conflict and reads ours on its next pass.
        self.kube.replace(kinds.SECRETS, secret, namespace=s.namespace)
        log.info("made a new WireGuard key pair; the private key is in Secret %s/%s only", s.namespace, s.key_secret)
        return private

    def reconcile(self) -> None:
        s = self.settings
        private = self.private_key()
        self.public_key = keys.public_key(private)
        where = f"ConfigMap {s.namespace}/{s.config_map}"
        config_map = self.kube.get_or_none(kinds.CONFIG_MAPS, s.config_map, namespace=s.namespace)
        if config_map is None:
            raise f.FabricError(f"{where} does not exist: `kube-offload peer --gateway` makes it")
        data: dict[str, Any] = config_map.get("data") or {}
        if data.get(f.PUBLIC_KEY) != self.public_key:
            self.kube.patch(kinds.CONFIG_MAPS, s.config_map, {"data": {f.PUBLIC_KEY: self.public_key}},
                            namespace=s.namespace)
            log.info("published public key %s in %s", self.public_key, where)
        config = f.parse_gateway_config(data, where)
        forwarding = self.engine.forwarding_problem()
        if forwarding:
            raise f.FabricError(forwarding)
        self.engine.apply(private, dp.Plane(s.interface, s.listen_port, config, allowed=self.allowed_pods()))
        self.has_peer = config.has_peer

    def allowed_pods(self) -> tuple[str, ...] | None:
        """The consumer's own pods on this provider: made by the enforcer (its label, which
        no consumer may set) for that consumer, with an IPv4 address."""
        consumer = self.settings.allow_pods_of
        if not consumer:
            return None
        selector = f"{c.LABEL_ORIGIN_CLUSTER_ID}={consumer},{c.LABEL_MANAGED_BY}={c.MANAGED_BY_ENFORCER}"
        pods = self.kube.list(kinds.PODS, label_selector=selector).get("items") or []
        ips = {entry.get("ip", "") for pod in pods if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
               for entry in (pod.get("status") or {}).get("podIPs") or []}
        return tuple(sorted(ip for ip in ips if ip and ":" not in ip))

    def reconcile_once(self) -> None:
        """One pass; what went wrong becomes :attr:`problem` (readiness says it) and is
        logged once per change, never raised: the next pass tries again."""
        try:
            self.reconcile()
            problem = None
        except (f.FabricError, EngineError) as exc:
            problem = str(exc)
        except ApiError as exc:
            problem = f"API server: {exc}"
        self.problem = problem
        said = f"{problem}|{self.has_peer}"
        if said != self._said:
            if problem:
                log.warning("%s", problem)
            else:
                log.info("link %s up (%s WireGuard, listening on UDP %d)%s", self.settings.interface,
                         self.engine.kind, self.settings.listen_port,
                         "" if self.has_peer else "; no peer yet: `kube-offload peer --gateway` hands over the keys")
            self._said = said

    # --- the loop ----------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                started = time.monotonic()
                self.reconcile_once()
                stop.wait(max(0.0, self.settings.resync - (time.monotonic() - started)))
        finally:
            self.engine.teardown(self.settings.interface)

    def ready_problem(self) -> str | None:
        return self.problem
