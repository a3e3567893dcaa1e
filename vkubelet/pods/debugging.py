"""The pod loop's step for ephemeral containers (``kubectl debug``) on an offloaded pod:
the local pod's new ephemeral containers that the provider's policy admits
(vkubelet/shared/policy_fit.py, judged one by one) are appended to its ShadowPod's template
(kube_offload/ephemeral_containers.py: the list only grows), and the provider's enforcer
adds them to the remote pod; their status comes back with the remote pod's (status.py).

A refused one never reaches the provider. Its local status says so, where ``kubectl debug``
looks: waiting, reason ``ProviderRefused``, and the refusal (which key the provider would
grant) as the message, which ``kubectl debug`` prints as a warning while it waits; with a
Warning Event on the pod. The policy's refusal is known before anything is sent; the
provider's own (its ShadowPod webhook, e.g. a privileged debug profile its Pod Security
level refuses) comes back as the answer to the template update and is shown the same way.
Kept apart from the template's other in-place changes (shadowpods.sync_template), so a
refused debug container never holds up a label change, nor the reverse."""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from kube_offload import ephemeral_containers as ec
from kube_offload import reasons, views
from kube_offload.runtime.kinds import SHADOWPODS
from kube_offload.runtime.kube import MERGE_PATCH, ApiError, object_key
from vkubelet.pods import refusals as rf
from vkubelet.pods.step_context import Desired, StepContext

# The backoff key of the template update carrying ephemeral containers: (pod key, EPHEMERAL).
EPHEMERAL = "ephemeral"
STATUSES = "ephemeralContainerStatuses"


def sync(loop: StepContext, local: dict[str, Any], shp: dict[str, Any], desired: Desired,
         logger: logging.LoggerAdapter[logging.Logger]) -> bool:
    """Carry the local pod's new admitted ephemeral containers into the template, and show
    the refused ones; True when there was nothing to do (the reconcile may remember it)."""
    have = _spec(shp)
    sent = set(ec.names(have))
    refused = [(name, why) for name, why in desired.remote.ephemeral_refused if name not in sent]
    done = _show_refused(loop, local, refused, f"cluster {loop.settings.cluster_id} refuses it", logger)
    grown = ec.grown_list(have, _spec(desired.shadowpod))
    if grown is None:
        return done
    meta = shp["metadata"]
    attempt = loop.refusals.attempt((object_key(local), EPHEMERAL), local)
    if attempt.wait > 0:
        return False  # refused before and nothing changed since; a timer brings us back
    try:
        loop.kube.patch(SHADOWPODS, meta["name"], {"spec": {"pod": {"spec": {ec.FIELD: grown}}}},
                        namespace=meta["namespace"], content_type=MERGE_PATCH)
    except ApiError as exc:
        refusal = rf.refusal_of(exc)
        if refusal is None:
            raise
        count, delay = loop.refusals.refused(attempt.key, attempt.fingerprint)
        logger.warning("cluster %s refused ephemeral containers for ShadowPod %s/%s (refusal %d in a row, next "
                       "attempt in %.0fs): %s", loop.settings.cluster_id, meta["namespace"], meta["name"], count, delay,
                       refusal.message)
        new = [str(c.get("name")) for c in grown if c.get("name") not in sent]
        _show_refused(loop, local, [(name, refusal.message) for name in new],
                      f"cluster {loop.settings.cluster_id} refused it", logger)
        loop.controller.enqueue_after(object_key(local), delay)
        return False
    loop.refusals.forget(attempt.key)
    logger.info("added ephemeral containers to ShadowPod %s/%s: %s", meta["namespace"], meta["name"],
                ", ".join(str(c.get("name")) for c in grown if c.get("name") not in sent))
    return False


def refused_statuses(local: Mapping[str, Any], refused: Iterable[tuple[str, str]], prefix: str) -> list[dict[str, Any]] | None:
    """The local pod's ephemeral container statuses with each refused one (name, why)
    waiting with the refusal; None when they already say so (pure)."""
    current = [dict(s) for s in (local.get("status") or {}).get(STATUSES) or [] if isinstance(s, Mapping)]
    images = {c.get("name"): c.get("image") or "" for c in ec.listed((local.get("spec") or {}))}
    by_name = {s.get("name"): i for i, s in enumerate(current)}
    changed = False
    for name, why in refused:
        waiting = {"reason": reasons.REASON_PROVIDER_REFUSED, "message": f"{prefix}: {why}"}
        entry = {"name": name, "image": images.get(name, ""), "imageID": "", "ready": False, "restartCount": 0,
                 "state": {"waiting": waiting}}
        index = by_name.get(name)
        if index is None:
            current.append(entry)
            changed = True
        elif ((current[index].get("state") or {}).get("waiting") or {}) != waiting:
            current[index] = entry
            changed = True
    return current if changed else None


def _show_refused(loop: StepContext, local: dict[str, Any], refused: list[tuple[str, str]], prefix: str,
                  logger: logging.LoggerAdapter[logging.Logger]) -> bool:
    """Write the refusals into the local status and Events; True when nothing was new."""
    statuses = refused_statuses(local, refused, prefix)
    if statuses is None:
        return True
    for name, why in refused:
        message = f"ephemeral container {name!r}: {prefix}: {why}"
        logger.warning("%s", message)
        loop.recorder.warning(local, reasons.REASON_PROVIDER_REFUSED, message)
    meta = local.get("metadata") or {}
    loop.local.patch_status(local, {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                                    "status": {STATUSES: statuses}})
    return False


def _spec(shadowpod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = (views.pod_template(shadowpod) or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}
