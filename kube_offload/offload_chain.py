"""The chain of clusters a pod went through on its way here (pure; docs/multihop.md).

A provider may let a consumer's twin namespaces be offloaded further (Consumer
``spec.furtherOffloading``): a pod made in cluster A then runs in C through B's virtual
node. Each hop records where the pod has been in annotation
:data:`~kube_offload.constants.ANNOTATION_OFFLOAD_CHAIN` (``a,b``), so that peerings that
form a loop (A -> B -> A, or longer) refuse the pod instead of sending it round forever.

Two places look at the chain, each with what it alone knows:

* the consumer's virtual kubelet, before sending: the chain so far plus its own cluster,
  against the cluster it sends to (:func:`extend` and :func:`loop_problem`); the pod is
  not sent and says why;
* the provider's enforcer, at admission: the chain must parse, end with the consumer that
  sends it (a consumer cannot pretend a pod came from elsewhere, or hide that it came
  through itself) and not hold the provider's own id (:func:`admission_problems`).

Neither is the security boundary of a hop (each provider still applies its own policy and
quota to what its consumer sends); the chain only makes a misconfigured loop visible and
finite.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from kube_offload import constants as c

SEPARATOR = ","
# What a cluster id may be (the vkubelet's --cluster-id / --local-cluster-id rule).
_CLUSTER_ID = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CLUSTER_ID_MAX = 63


class ChainError(ValueError):
    """The annotation is not a chain of cluster ids; the message names it and the fix."""


def parse(value: object) -> tuple[str, ...]:
    """The cluster ids in an annotation value, oldest first; () for None or "".
    Raises :class:`ChainError` on a value that is not a string (a template is the
    consumer's JSON, never trusted to be well formed), an empty element, an id that is not
    a DNS label, or more than :data:`~kube_offload.constants.MAX_OFFLOAD_HOPS` ids."""
    if value is None or value == "":
        return ()
    if not isinstance(value, str):
        raise ChainError(f"annotation {c.ANNOTATION_OFFLOAD_CHAIN}: must be a string, got {value!r}")
    ids = tuple(part.strip() for part in value.split(SEPARATOR))
    for cluster_id in ids:
        if not cluster_id or len(cluster_id) > _CLUSTER_ID_MAX or not _CLUSTER_ID.match(cluster_id):
            raise ChainError(
                f"annotation {c.ANNOTATION_OFFLOAD_CHAIN}={value!r}: {cluster_id!r} is not a cluster id; the value is "
                "the cluster ids the pod went through, comma-separated (lowercase letters, digits and '-')"
            )
    if len(ids) > c.MAX_OFFLOAD_HOPS:
        raise ChainError(
            f"annotation {c.ANNOTATION_OFFLOAD_CHAIN}: the pod went through {len(ids)} clusters "
            f"({describe(ids)}), more than the {c.MAX_OFFLOAD_HOPS} allowed; offload it from fewer hops away"
        )
    return ids


def encode(chain: Sequence[str]) -> str:
    return SEPARATOR.join(chain)


def describe(chain: Sequence[str]) -> str:
    """``a -> b -> c``: how messages name a chain."""
    return " -> ".join(chain)


def of(annotations: Mapping[str, object] | None) -> tuple[str, ...]:
    """The chain an object's annotations record (see :func:`parse`)."""
    return parse((annotations or {}).get(c.ANNOTATION_OFFLOAD_CHAIN))


def extend(previous: Sequence[str], cluster_id: str) -> tuple[str, ...]:
    """The chain a pod carries when ``cluster_id`` sends it on: ``previous`` (the hops
    before, empty for a pod made in ``cluster_id``) plus ``cluster_id``."""
    return (*previous, cluster_id)


def loop_problem(chain: Sequence[str], next_cluster: str) -> str | None:
    """Why a pod with ``chain`` may not go to ``next_cluster`` (None: it may): that
    cluster is already in the chain, or the chain would exceed the hop limit."""
    if next_cluster in chain:
        return (
            f"offloading loop: the pod would go {describe([*chain, next_cluster])}, and cluster {next_cluster} "
            "is already in its chain; remove one of the peerings that close the loop, or turn off further "
            "offloading (Consumer spec.furtherOffloading) on one of its providers"
        )
    if len(chain) + 1 > c.MAX_OFFLOAD_HOPS:
        return (
            f"offloading chain too long: {describe([*chain, next_cluster])} is {len(chain) + 1} clusters, more than "
            f"the {c.MAX_OFFLOAD_HOPS} allowed; turn off further offloading on one of the providers on the way"
        )
    return None


def admission_problems(annotations: Mapping[str, object] | None, consumer_id: str, own_cluster_id: str) -> list[str]:
    """What the provider ``own_cluster_id`` refuses in the chain of a pod template that
    consumer ``consumer_id`` writes (empty: nothing). An absent chain stands for
    ``[consumer_id]`` (a consumer of a version before chains); ``own_cluster_id`` "" (an
    enforcer not told its id) skips the loop check, not the others."""
    try:
        chain = of(annotations) or (consumer_id,)
    except ChainError as exc:
        return [str(exc)]
    problems = []
    if chain[-1] != consumer_id:
        problems.append(
            f"annotation {c.ANNOTATION_OFFLOAD_CHAIN}={encode(chain)!r} must end with {consumer_id!r}, the consumer "
            "that sends the pod; its virtual kubelet appends its own cluster id"
        )
    if own_cluster_id:
        problem = loop_problem(chain, own_cluster_id)
        if problem:
            problems.append(problem)
    return problems
