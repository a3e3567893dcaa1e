"""kube_offload.runtime.namespaced_informer against a real kube-apiserver, under an identity that
may read ConfigMaps only in some namespaces (a ServiceAccount with a Role in each, its
token minted with `kubectl create token`), as the virtual kubelet's consumer identity
may read pods only in its twin namespaces. The cluster-wide list that identity cannot
make is asserted to be forbidden, so the test proves the scoping is needed, not only
that it works.

The cluster is this module's own (one kwokctl control plane, no nodes). Objects are
created, changed and deleted with kubectl; the informer sees them through its watches.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Iterator

import pytest
from kubernetes import client

from kube_offload.runtime.informer import ADDED, DELETED, MODIFIED
from kube_offload.runtime.kube import ApiError, call_json, load_api_client
from kube_offload.runtime.namespaced_informer import MultiNamespaceInformer
from kube_offload_harness.cluster import Cluster
from support.clusters import bare_cluster
from support.waiting import wait_for

NS_A, NS_B, NS_C = "ni-a", "ni-b", "ni-c"  # the reader may read a and b, never c
TIMEOUT = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with bare_cluster(tmp_path_factory, "nsinformer", NS_A, NS_B, NS_C) as cluster:
        cluster.kubectl("create", "serviceaccount", "reader", "-n", NS_A)
        for ns in (NS_A, NS_B):
            cluster.kubectl("create", "role", "read-configmaps", "-n", ns, "--verb=get,list,watch", "--resource=configmaps")
            cluster.kubectl(
                "create", "rolebinding", "reader", "-n", ns, "--role=read-configmaps", f"--serviceaccount={NS_A}:reader"
            )
        yield cluster


@pytest.fixture(scope="module")
def reader(cluster: Cluster) -> client.ApiClient:
    """A client that authenticates as the ServiceAccount, not as the admin."""
    token = cluster.kubectl("create", "token", "reader", "-n", NS_A, "--duration=1h").stdout.strip()
    admin = load_api_client(str(cluster.kubeconfig))
    config = client.Configuration()
    config.host = admin.configuration.host
    config.ssl_ca_cert = admin.configuration.ssl_ca_cert
    config.verify_ssl = admin.configuration.verify_ssl
    config.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(config)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, kind: str, _old: dict | None, new: dict) -> None:
        meta = new.get("metadata") or {}
        with self._lock:
            self.events.append((kind, f"{meta.get('namespace')}/{meta.get('name')}"))

    def saw(self, kind: str, key: str) -> bool:
        with self._lock:
            return (kind, key) in self.events


def until(predicate, what: str, timeout: float = TIMEOUT):
    return wait_for(predicate, what=what, timeout=timeout, interval=0.2)


def test_watches_only_the_namespaces_it_is_given(cluster: Cluster, reader: client.ApiClient):
    core = client.CoreV1Api(reader)
    with pytest.raises(ApiError) as forbidden:
        call_json(core.list_config_map_for_all_namespaces)
    assert forbidden.value.status == 403  # cluster-wide is not an option for this identity

    cluster.kubectl("create", "configmap", "before", "-n", NS_A, "--from-literal=k=v")
    informer = MultiNamespaceInformer(
        name="configmaps",
        list_for_namespace=lambda ns: functools.partial(core.list_namespaced_config_map, ns),
        watch_timeout_seconds=20,
    )
    seen = Recorder()
    informer.add_handler(seen)
    informer.set_namespaces([NS_A, NS_B])
    informer.start()
    try:
        until(informer.has_synced, "the first list of both namespaces")
        assert informer.get(f"{NS_A}/before") is not None
        assert seen.saw(ADDED, f"{NS_A}/before")
        assert informer.last_contact > 0

        # watch: create, change, delete in a namespace already watched
        cluster.kubectl("create", "configmap", "live", "-n", NS_B, "--from-literal=k=1")
        until(lambda: informer.get(f"{NS_B}/live"), "the ConfigMap created in ni-b")
        cluster.kubectl("patch", "configmap", "live", "-n", NS_B, "--type=merge", "-p", '{"data":{"k":"2"}}')
        until(lambda: (informer.get(f"{NS_B}/live") or {}).get("data", {}).get("k") == "2", "the change")
        assert seen.saw(MODIFIED, f"{NS_B}/live")
        cluster.kubectl("delete", "configmap", "live", "-n", NS_B)
        until(lambda: informer.get(f"{NS_B}/live") is None, "the deletion")
        assert seen.saw(DELETED, f"{NS_B}/live")

        # a namespace that goes away: its objects leave the cache as DELETED events
        a_keys = [key for key in informer.keys() if key.startswith(f"{NS_A}/")]
        assert f"{NS_A}/before" in a_keys
        informer.set_namespaces([NS_B])
        assert informer.get(f"{NS_A}/before") is None
        assert not any(key.startswith(f"{NS_A}/") for key in informer.keys())
        assert all(seen.saw(DELETED, key) for key in a_keys)
        cluster.kubectl("create", "configmap", "unwatched", "-n", NS_A, "--from-literal=k=v")
        time.sleep(2)
        assert informer.get(f"{NS_A}/unwatched") is None

        # a namespace it may not read (403) counts as synced, empty and forbidden: it does
        # not disturb the others, nor hold back has_synced (a vkubelet's loops would never
        # start), and it is named so that nobody acts on its empty cache
        informer.set_namespaces([NS_B, NS_C])
        until(lambda: informer.forbidden_namespaces() == [NS_C], "ni-c reported forbidden")
        assert informer.has_synced()
        assert "cannot list" in informer.forbidden_reason(NS_C)
        assert not informer.namespace_synced(NS_C) and informer.namespace_synced(NS_B)
        assert not any(key.startswith(f"{NS_C}/") for key in informer.keys())
        cluster.kubectl("create", "configmap", "still", "-n", NS_B, "--from-literal=k=v")
        until(lambda: informer.get(f"{NS_B}/still"), "ni-b's watch to go on beside the forbidden ni-c")

        # and a namespace that comes back is listed afresh, objects made meanwhile included
        informer.set_namespaces([NS_A, NS_B])
        until(informer.has_synced, "ni-a listed again")
        assert informer.get(f"{NS_A}/unwatched") is not None
        assert seen.saw(ADDED, f"{NS_A}/unwatched")
    finally:
        informer.stop()
