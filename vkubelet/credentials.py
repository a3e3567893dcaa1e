"""The virtual kubelet's credentials in the remote cluster, while it runs: a bound token
(TokenRequest) that it renews itself before it expires, without a restart.

- :class:`RemoteCredentials` is the token every remote request carries. It is installed
  as the remote client ``Configuration``'s ``refresh_api_key_hook``, which the client
  calls for every request (``auth_settings``): runtime.kube.Kube's requests, the
  informers' lists and watches (they go through Kube), the kubelet API's remote streams
  (vkubelet/kubeletapi/remote.py reads ``auth_settings`` too) all use the current token
  from the moment it changes. A watch opened with the old token goes on: the API server
  checks a token when a request starts, so the watch ends as it would have, and the
  informer's next watch (or re-list) carries the new one. Nothing is re-listed because of
  a rotation.
- :class:`SecretFollower` runs in every replica, leader or standby: it reads the local
  kubeconfig Secret (the one `kube-offload peer` wrote and the leader renews) through
  the API every few seconds and takes a token that expires later than the one it holds.
  Reading the Secret, not the mounted file, keeps a replica current within seconds
  instead of the kubelet's volume sync period, and works the same for a process.
- :class:`TokenRenewer` runs in the leader only: at ``fraction`` of the token's lifetime
  it asks the remote cluster for a new token for its own ServiceAccount with the token
  it holds (the remote chart allows exactly that), takes it, and writes it back into the
  Secret (resourceVersion precondition: a concurrent `peer` wins, and is followed).
  A token that expired (the virtual kubelet was down longer than its lifetime) or was
  refused is said once in the log and as a Warning Event on the node, with the fix:
  `kube-offload peer` again, whose plan issues a new one; the follower then picks it up.

When is pure (kube_offload.bound_tokens: the token's own iat/exp claims and the fraction);
this module is the thin I/O around it.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from typing import Any, Callable

import yaml
from kubernetes import client

from kube_offload import bound_tokens as bt
from kube_offload import constants as c
from kube_offload import reasons
from kube_offload.runtime import kinds
from kube_offload.runtime.events import EventRecorder
from kube_offload.runtime.kube import ApiError, Kube
from kube_offload.runtime.manager import Loop, Manager
from vkubelet.settings import Settings

log = logging.getLogger("kube_offload.vkubelet.credentials")

# How often every replica reads the kubeconfig Secret.
FOLLOW_SECONDS = 5.0
# How long the renewer sleeps at most before it looks again (a token from the follower
# may have moved the renewal point), and waits after a failed renewal.
RECHECK_SECONDS = 30.0
RETRY_SECONDS = 10.0


class RemoteCredentials:
    """The bearer token of the remote client, replaced while requests go on."""

    def __init__(self, token: str) -> None:
        self._token = token
        self._lock = threading.Lock()

    @property
    def token(self) -> str:
        with self._lock:
            return self._token

    def install(self, configuration: client.Configuration) -> None:
        """Every request of ``configuration``'s clients carries the current token from now on
        (replacing the kubeconfig loader's own hook, which would restore the file's token)."""
        configuration.refresh_api_key_hook = self._apply  # type: ignore[assignment]  # the stub types it None only
        self._apply(configuration)

    def _apply(self, configuration: client.Configuration) -> None:
        configuration.api_key["BearerToken"] = f"Bearer {self.token}"
        configuration.api_key_prefix.pop("BearerToken", None)

    def offer(self, token: str, source: str) -> bool:
        """Take ``token`` if it expires later than the current one; whether it was taken."""
        with self._lock:
            if not bt.fresher(self._token, token):
                return False
            self._token = token
        life = bt.lifetime(token)
        log.info("remote credentials: now using the token from %s%s", source,
                 f", valid until {bt.rfc3339(life.expires)}" if life else "")
        return True


def kubeconfig_from_secret(secret: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    data = ((secret or {}).get("data") or {}).get(key)
    if not data:
        return None
    parsed = yaml.safe_load(base64.b64decode(data))
    return parsed if isinstance(parsed, dict) else None


class SecretFollower:
    """Every replica: the token of the kubeconfig Secret, whenever it is fresher."""

    def __init__(self, local: Kube, credentials: RemoteCredentials, namespace: str, name: str, key: str,
                 interval: float = FOLLOW_SECONDS) -> None:
        self.local, self.credentials = local, credentials
        self.namespace, self.name, self.key = namespace, name, key
        self.interval = interval
        self._failing = False

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.poll()
            stop.wait(self.interval)

    def poll(self) -> None:
        try:
            secret = self.local.get_or_none(kinds.SECRETS, self.name, namespace=self.namespace)
        except ApiError as exc:
            if not self._failing:  # once per streak: a standby may poll for days
                log.warning("remote credentials: cannot read Secret %s/%s: %s", self.namespace, self.name, exc)
            self._failing = True
            return
        self._failing = False
        try:
            token = bt.kubeconfig_token(kubeconfig_from_secret(secret, self.key))
        except (ValueError, yaml.YAMLError) as exc:
            log.warning("remote credentials: Secret %s/%s key %s holds no kubeconfig: %s", self.namespace, self.name, self.key, exc)
            return
        if token:
            self.credentials.offer(token, f"Secret {self.namespace}/{self.name}")


class TokenRenewer:
    """The leader: renews the token at ``fraction`` of its lifetime and writes it back."""

    def __init__(self, *, remote: Kube, local: Kube, credentials: RemoteCredentials, tenant_namespace: str,
                 secret_namespace: str, secret_name: str, secret_key: str, fraction: float,
                 recorder: EventRecorder, node_name: str, clock: Callable[[], float] = time.time) -> None:
        self.remote, self.local, self.credentials = remote, local, credentials
        self.tenant_namespace = tenant_namespace
        self.secret_namespace, self.secret_name, self.secret_key = secret_namespace, secret_name, secret_key
        self.fraction = fraction
        self.recorder, self.node_name = recorder, node_name
        self.clock = clock
        self._unwritten: bt.Grant | None = None  # renewed, not yet in the Secret
        self._reported: str | None = None  # the token whose trouble was reported

    def run(self, stop: threading.Event) -> None:
        if bt.lifetime(self.credentials.token) is None:
            log.warning("remote credentials: the token of the remote kubeconfig never expires (not a bound token); "
                        "it is not renewed: run `kube-offload peer` again to replace it by one (docs/security.md)")
        while not stop.is_set():
            stop.wait(self.step())

    def step(self) -> float:
        """One look: renew if due, write a renewal back; seconds until the next look."""
        if self._unwritten is not None and not self._write(self._unwritten):
            return RETRY_SECONDS
        token = self.credentials.token
        life = bt.lifetime(token)
        if life is None:
            return RECHECK_SECONDS
        now = self.clock()
        if life.expired(now):
            self._report(token, reasons.REASON_REMOTE_CREDENTIALS_EXPIRED,
                         f"the token of the remote kubeconfig expired at {bt.rfc3339(life.expires)} before it could be "
                         f"renewed (the virtual kubelet did not run); run `kube-offload peer` again to issue a new one")
            return RETRY_SECONDS
        due = life.renew_at(self.fraction)
        if now < due:
            return min(due - now, RECHECK_SECONDS)
        return 0.0 if self._renew(token, life) else RETRY_SECONDS

    def _renew(self, token: str, life: bt.Lifetime) -> bool:
        seconds = max(bt.MIN_EXPIRATION_SECONDS, round(life.seconds))
        body = bt.request_body(c.CONSUMER_SERVICE_ACCOUNT, seconds)
        try:
            answer = self.remote.create(kinds.SERVICE_ACCOUNTS, body, namespace=self.tenant_namespace, subresource="token")
            grant = bt.grant_from_response(answer, self.clock())
        except ApiError as exc:
            if exc.status == 401:
                self._report(token, reasons.REASON_REMOTE_CREDENTIALS_REFUSED,
                             f"the remote cluster refused the token of the remote kubeconfig (valid until "
                             f"{bt.rfc3339(life.expires)}): revoked, its ServiceAccount deleted? run `kube-offload peer` again")
            else:
                log.warning("remote credentials: renewing the token failed (expires %s): %s", bt.rfc3339(life.expires), exc)
            return False
        except ValueError as exc:
            log.warning("remote credentials: renewing the token failed: %s", exc)
            return False
        self.credentials.offer(grant.token, "a renewal")
        self._unwritten = grant
        self._write(grant)
        return True

    def _write(self, grant: bt.Grant) -> bool:
        """The renewed token into the kubeconfig Secret, if that still holds an older one."""
        try:
            secret = self.local.get(kinds.SECRETS, self.secret_name, namespace=self.secret_namespace)
            kubeconfig = kubeconfig_from_secret(secret, self.secret_key)
            if kubeconfig is None:
                raise ValueError(f"key {self.secret_key} holds no kubeconfig")
            if not bt.fresher(bt.kubeconfig_token(kubeconfig) or "", grant.token):
                self._unwritten = None  # someone (peer) wrote a fresher one: it is followed
                return True
            data = dict(secret.get("data") or {})
            data[self.secret_key] = base64.b64encode(yaml.safe_dump(bt.with_token(kubeconfig, grant.token)).encode()).decode()
            patch = {"metadata": {"annotations": bt.secret_annotations(grant)}, "data": data}
            self.local.patch(kinds.SECRETS, self.secret_name, patch, namespace=self.secret_namespace,
                             resource_version=secret["metadata"]["resourceVersion"])
        except (ApiError, ValueError, yaml.YAMLError) as exc:
            log.warning("remote credentials: writing the renewed token into Secret %s/%s failed (retried): %s",
                        self.secret_namespace, self.secret_name, exc)
            return False
        self._unwritten = None
        message = f"renewed the remote token; valid until {bt.rfc3339(grant.lifetime.expires)}"
        log.info("remote credentials: %s (Secret %s/%s)", message, self.secret_namespace, self.secret_name)
        self.recorder.normal(self._node(), reasons.REASON_REMOTE_CREDENTIALS_RENEWED, message)
        return True

    def _report(self, token: str, reason: str, message: str) -> None:
        if self._reported == token:
            return
        self._reported = token
        log.error("remote credentials: %s", message)
        self.recorder.warning(self._node(), reason, message)

    def _node(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name}}


def declare_credentials(manager: Manager, settings: Settings, local: client.ApiClient, remote: client.ApiClient,
                        recorder: EventRecorder) -> RemoteCredentials | None:
    """Install the swappable token on ``remote`` and declare the follower (every replica)
    and the renewer (the leader); None, and nothing declared, when the remote kubeconfig
    holds no token (a client certificate, an exec plugin: renewed their own way) or no
    Secret was named (nothing to renew into)."""
    assert settings.remote_kubeconfig, "validated: --remote-kubeconfig is required"
    with open(settings.remote_kubeconfig, encoding="utf-8") as handle:
        kubeconfig = yaml.safe_load(handle)
    token = bt.kubeconfig_token(kubeconfig if isinstance(kubeconfig, dict) else None)
    if token is None or not settings.remote_kubeconfig_secret:
        life = bt.lifetime(token) if token else None
        if life is not None:
            log.warning("remote credentials: no --remote-kubeconfig-secret: the bound token of %s is never renewed "
                        "and stops working at %s", settings.remote_kubeconfig, bt.rfc3339(life.expires))
        return None
    credentials = RemoteCredentials(token)
    credentials.install(remote.configuration)
    namespace, _, name = settings.remote_kubeconfig_secret.partition("/")
    local_kube = Kube(local)
    follower = SecretFollower(local_kube, credentials, namespace, name, settings.remote_kubeconfig_secret_key)
    renewer = TokenRenewer(
        remote=Kube(remote), local=local_kube, credentials=credentials, tenant_namespace=settings.tenant_namespace,
        secret_namespace=namespace, secret_name=name, secret_key=settings.remote_kubeconfig_secret_key,
        fraction=settings.remote_token_renew_fraction, recorder=recorder, node_name=settings.node_name,
    )
    manager.add_loop(Loop(name="remote-credentials-follower", run=follower.run, needs_leader=False, logger=log))
    manager.add_loop(Loop(name="remote-credentials-renewer", run=renewer.run, logger=log))
    return credentials
