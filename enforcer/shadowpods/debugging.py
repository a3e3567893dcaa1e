"""The ShadowPod controller's step for ephemeral containers (``kubectl debug``,
kube_offload/ephemeral_containers.py): the template's ephemeral containers that the running
pod lacks are added to it through ``pods/ephemeralcontainers``, the one way to add a
container to a running pod. Each addition is judged first, like every pod the enforcer
makes, against the Consumer as it is now (``pods.ephemeralContainers``, images, security
context: the pod as it will be with them). A refusal, the judge's or the API server's (Pod
Security admission on the subresource, say), is a Warning Event on the ShadowPod, which the
consumer's virtual kubelet shows on its local pod; it is tried again after
:data:`REFUSED_RECHECK_SECONDS` (the Consumer may grant it meanwhile) or when the template
changes, and told once."""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from enforcer.shadowpods.api import (
    GRANT_UNKNOWN_RECHECK_SECONDS,
    REFUSED_RECHECK_SECONDS,
    EnforcerApi,
    pod_message,
    write_refused,
)
from enforcer.shadowpods.events import EventRecorder
from kube_offload import ephemeral_containers as ec
from kube_offload import reasons
from kube_offload.admission import Decision
from kube_offload.runtime.controller import Requeue
from kube_offload.runtime.events import NORMAL, WARNING
from kube_offload.runtime.kube import ApiError
from kube_offload.shadowpod import PodFate, pod_fate
from kube_offload.views import pod_template


Judge = Callable[[Mapping[str, Any]], Decision]


class EphemeralContainers:
    def __init__(self, api: EnforcerApi, recorder: EventRecorder, judge: Callable[[], Judge],
                 clock: Callable[[], float]) -> None:
        """``judge``: the reconciler's current judge (it is set after the webhook is built)."""
        self._api = api
        self._recorder = recorder
        self._judge = judge
        self._clock = clock
        # ShadowPod key -> (names, message, when) of the last refusal: told once, tried again
        # after REFUSED_RECHECK_SECONDS. A key is reconciled by one worker at a time.
        self._refused: dict[str, tuple[tuple[str, ...], str, float]] = {}

    def forget(self, key: str) -> None:
        self._refused.pop(key, None)

    def sync(self, shadowpod: Mapping[str, Any], pod: Mapping[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        """Add to the running ``pod`` the ephemeral containers of ``shadowpod``'s template it
        lacks and may still run; raises Requeue to look again after a refusal."""
        meta = shadowpod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        template = pod_template(shadowpod) or {}
        spec = template.get("spec") if isinstance(template.get("spec"), Mapping) else {}
        adding = ec.to_add(spec or {}, pod) if pod_fate(pod) is PodFate.ACTIVE else []
        if not adding:
            self._refused.pop(key, None)
            return
        names = tuple(str(c.get("name")) for c in adding)
        known = self._refused.get(key)
        if known is not None and known[0] == names and self._clock() - known[2] < REFUSED_RECHECK_SECONDS:
            return  # refused a moment ago; the Requeue then brings it back
        verdict = self._judge()(ec.for_adding(shadowpod, names))
        if not verdict.allowed:
            if verdict.code == 503:
                raise Requeue(GRANT_UNKNOWN_RECHECK_SECONDS, f"could not judge ephemeral containers yet: {verdict.message}")
            self._refuse(key, shadowpod, names, f"the provider's rules refuse them: {verdict.message}", logger)
        pod_meta = pod["metadata"]
        try:
            self._api.add_ephemeral_containers(pod_meta["namespace"], pod_meta["name"], ec.add_patch(adding))
        except ApiError as exc:
            if not write_refused(exc, pod_meta["name"]):
                return
            self._refuse(key, shadowpod, names, pod_message(exc), logger)
        self._refused.pop(key, None)
        message = f"Added ephemeral container{'s' if len(names) > 1 else ''} {', '.join(names)} to pod {pod_meta['name']}"
        logger.info("%s", message)
        self._recorder.record(shadowpod, NORMAL, reasons.REASON_EPHEMERAL_CONTAINERS_ADDED, message)

    def _refuse(self, key: str, shadowpod: Mapping[str, Any], names: tuple[str, ...], why: str,
                logger: logging.LoggerAdapter[logging.Logger]) -> None:
        message = f"ephemeral container{'s' if len(names) > 1 else ''} {', '.join(names)} not added to the pod: {why}"
        known = self._refused.get(key)
        if known is None or known[:2] != (names, message):
            logger.warning("%s", message)
            self._recorder.record(shadowpod, WARNING, reasons.REASON_EPHEMERAL_CONTAINERS_REFUSED, message)
        self._refused[key] = (names, message, self._clock())
        raise Requeue(REFUSED_RECHECK_SECONDS, "ephemeral containers refused")
