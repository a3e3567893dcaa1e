"""DaemonSet pods stay home: which pods are DaemonSet pods, the Pending status that keeps
the DaemonSet controller from churning them, and the opt-in flag."""

from __future__ import annotations

import argparse

import pytest

from vkubelet import cli
from vkubelet.pods.daemonsets import REASON_NOT_OFFLOADED, daemonset_of, message, needs_ending, pending_patch


def owned(*refs: dict) -> dict:
    return {"metadata": {"name": "agent-x", "ownerReferences": list(refs)}}


DS = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "1", "controller": True}


@pytest.mark.parametrize(
    "pod, expected",
    [
        (owned(DS), "agent"),
        (owned({**DS, "apiVersion": "apps/v1beta2"}), "agent"),
        (owned({**DS, "controller": False}), None),  # only the controller counts
        (owned({**DS, "apiVersion": "example.com/v1"}), None),  # someone else's kind of the same name
        (owned({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": True}), None),
        (owned({"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}, DS), "agent"),
        ({"metadata": {"name": "bare"}}, None),
    ],
)
def test_daemonset_of(pod, expected):
    assert daemonset_of(pod) == expected


def test_pending_patch_says_why_once():
    text = message("agent", "remote-1", "kube-offload-remote-1")
    assert "--offload-daemonset-pods" in text and "kube-offload.io/type NotIn [virtual-node]" in text
    pod = owned(DS)
    patch = pending_patch(pod, text)
    assert patch == {"status": {"phase": "Pending", "reason": REASON_NOT_OFFLOADED, "message": text}}
    pod["status"] = patch["status"]
    assert pending_patch(pod, text) is None, "said once: no write at every resync"
    assert pending_patch({**pod, "status": {"phase": "Running"}}, text) is None


def test_never_failed_while_pending_only_a_running_pod_ends():
    # The DaemonSet controller deletes and recreates Failed daemon pods: Pending ones stay.
    assert not needs_ending({"status": {"phase": "Pending"}})
    assert not needs_ending({})
    assert needs_ending({"status": {"phase": "Running"}})


def _settings(*flags: str):
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["vkubelet", "--cluster-id", "r", "--local-cluster-id", "l", "--remote-kubeconfig", "/k", *flags])
    return cli.settings_from_args(args)


def test_offload_daemonset_pods_flag_defaults_to_off():
    assert _settings().offload_daemonset_pods is False
    assert _settings("--offload-daemonset-pods", "true").offload_daemonset_pods is True


def test_offload_daemonset_pods_from_the_environment(monkeypatch):
    monkeypatch.setenv("KUBE_OFFLOAD_VKUBELET_OFFLOAD_DAEMONSET_PODS", "true")
    assert _settings().offload_daemonset_pods is True
