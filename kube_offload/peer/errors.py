"""The two errors of ``peer`` and ``unpeer`` besides a refused input
(:class:`kube_offload.peering.PeeringError`, exit code 2): both exit with 1."""

from __future__ import annotations


class CommandError(RuntimeError):
    """Something on the way failed (a cluster, Helm, a timeout); the message says what."""


class Unreachable(CommandError):
    """An API server did not answer; worth retrying while waiting."""

