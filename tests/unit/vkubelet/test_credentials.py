"""vkubelet.credentials: the remote client's token swapped while it runs, and the
renewer's schedule (the parts that need no API server; the e2e tier renews for real,
tests/e2e/test_peering.py)."""

from __future__ import annotations

import base64
import json
import re

import pytest
import yaml
from kubernetes import client, config

from kube_offload import reasons
from vkubelet import credentials as cr
from vkubelet.settings import Settings, SettingsError


def jwt(iat: int, exp: int) -> str:
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256'})}.{part({'iat': iat, 'exp': exp})}.c2ln"


def bearer(configuration: client.Configuration) -> str:
    return configuration.auth_settings()["BearerToken"]["value"]


def test_every_request_carries_the_current_token_even_from_a_kubeconfig_client(tmp_path):
    """The kubeconfig loader installs its own hook, which puts the file's token back on
    every request; ours replaces it."""
    old, new = jwt(0, 600), jwt(300, 900)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "r",
        "clusters": [{"name": "r", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": old}}],
        "contexts": [{"name": "r", "context": {"cluster": "r", "user": "u"}}],
    }))
    api = config.new_client_from_config(config_file=str(path))
    creds = cr.RemoteCredentials(old)
    creds.install(api.configuration)
    assert bearer(api.configuration) == f"Bearer {old}"
    assert creds.offer(new, "test")
    assert bearer(api.configuration) == f"Bearer {new}"
    # a lagging copy (the Secret before the leader's write arrived) never wins back
    assert not creds.offer(old, "test")
    assert bearer(api.configuration) == f"Bearer {new}"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def warning(self, obj, reason, message):
        self.events.append(("Warning", reason, message))

    def normal(self, obj, reason, message):
        self.events.append(("Normal", reason, message))


def renewer(token: str, now: float, recorder: Recorder, fraction: float = 0.8) -> cr.TokenRenewer:
    # remote/local are never reached on these paths (nothing is due)
    return cr.TokenRenewer(
        remote=None, local=None, credentials=cr.RemoteCredentials(token), tenant_namespace="kube-offload-tenant-local",  # type: ignore[arg-type]
        secret_namespace="kube-offload", secret_name="remote-kubeconfig", secret_key="kubeconfig", fraction=fraction,
        recorder=recorder, node_name="kube-offload-remote", clock=lambda: now,  # type: ignore[arg-type]
    )


def test_the_renewer_sleeps_until_the_renewal_point_looking_again_every_30s():
    recorder = Recorder()
    assert renewer(jwt(1000, 1600), now=1470, recorder=recorder).step() == 10  # due at 1480
    assert renewer(jwt(1000, 1600), now=1000, recorder=recorder).step() == cr.RECHECK_SECONDS
    assert renewer(jwt(1000, 1600), now=1001, recorder=recorder, fraction=0.01).step() == 5
    assert recorder.events == []


def test_an_expired_token_is_reported_once_with_the_fix():
    recorder = Recorder()
    subject = renewer(jwt(1000, 1600), now=1700, recorder=recorder)
    assert subject.step() == cr.RETRY_SECONDS
    assert subject.step() == cr.RETRY_SECONDS
    [(kind, reason, message)] = recorder.events
    assert (kind, reason) == ("Warning", reasons.REASON_REMOTE_CREDENTIALS_EXPIRED)
    assert "expired at 1970-01-01T00:26:40Z" in message and "kube-offload peer" in message


def test_the_kubeconfig_of_a_secret():
    kubeconfig = {"current-context": "r"}
    secret = {"data": {"kubeconfig": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()}}
    assert cr.kubeconfig_from_secret(secret, "kubeconfig") == kubeconfig
    assert cr.kubeconfig_from_secret(secret, "other") is None
    assert cr.kubeconfig_from_secret(None, "kubeconfig") is None


@pytest.mark.parametrize("overrides, message", [
    ({"remote_token_renew_fraction": 1.0}, "--remote-token-renew-fraction=1.0 must be between 0 and 1"),
    ({"remote_token_renew_fraction": 0.0}, "--remote-token-renew-fraction=0.0 must be between 0 and 1"),
    ({"remote_kubeconfig_secret": "no-namespace"}, "--remote-kubeconfig-secret='no-namespace' must be NAMESPACE/NAME"),
    ({"remote_kubeconfig_secret": "ns/x", "remote_kubeconfig_secret_key": ""}, "--remote-kubeconfig-secret-key must name"),
])
def test_settings_name_the_flag_that_cannot_work(overrides, message):
    settings = Settings(cluster_id="remote", local_cluster_id="local", remote_kubeconfig="k", **overrides)
    with pytest.raises(SettingsError, match=re.escape(message)):
        settings.validate()


def test_settings_accept_the_charts_values():
    Settings(cluster_id="remote", local_cluster_id="local", remote_kubeconfig="k",
             remote_kubeconfig_secret="kube-offload/remote-kubeconfig", remote_token_renew_fraction=0.05).validate()
