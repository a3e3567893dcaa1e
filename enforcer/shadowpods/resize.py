"""The enforcer's half of an in-place resize: a ShadowPod whose template asks for other cpu
or memory figures than its running pod has gets them through the provider's own
``pods/resize`` subresource (kube_offload/pod_resize.py), never by a new pod. The kubelet
then resizes the containers (restarting one only where its ``resizePolicy`` says so) and
reports it in the pod's status and conditions, which the consumer's virtual kubelet
mirrors. The ShadowPod webhook judged the new figures against the consumer's quota and
slice when the template changed, and dry-ran this very resize (enforcer/admission/dry_run.py);
a refusal met here anyway (a policy added in between) is a Warning Event on the ShadowPod,
which the virtual kubelet shows on the local pod, and the pod runs on as it was."""

from __future__ import annotations

import logging
import threading
from typing import Any

from enforcer.shadowpods.api import EnforcerApi, pod_message, write_refused
from enforcer.shadowpods.events import EventRecorder
from kube_offload import reasons
from kube_offload.pod_resize import describe_resize, pod_resize_patch
from kube_offload.runtime.events import NORMAL, WARNING
from kube_offload.runtime.kube import ApiError
from kube_offload.shadowpod import PodFate, pod_fate
from kube_offload.views import pod_template


class Resizer:
    """Brings running pods to their template's cpu and memory; remembers a refused resize
    per ShadowPod so the same refusal is not asked again at every reconcile."""

    def __init__(self, api: EnforcerApi, recorder: EventRecorder) -> None:
        self._api = api
        self._recorder = recorder
        self._lock = threading.Lock()
        self._refused: dict[str, str] = {}  # ShadowPod key -> the resize refused

    def forget(self, key: str) -> None:
        with self._lock:
            self._refused.pop(key, None)

    def resize(self, shadowpod: dict[str, Any], pod: dict[str, Any], logger: logging.LoggerAdapter[logging.Logger]) -> None:
        if pod_fate(pod) is not PodFate.ACTIVE:
            return  # a finished run is mirrored, not changed
        template = pod_template(shadowpod) or {}
        patch = pod_resize_patch(pod.get("spec") or {}, template.get("spec") or {})
        meta = shadowpod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if patch is None:
            self.forget(key)
            return
        what = describe_resize(patch)
        with self._lock:
            if self._refused.get(key) == what:
                return
        name = pod["metadata"]["name"]
        try:
            self._api.resize_pod(pod["metadata"]["namespace"], name, patch)
        except ApiError as exc:
            if not write_refused(exc, name):
                return
            with self._lock:
                self._refused[key] = what
            message = f"the provider refused to resize pod {name} in place ({what}): {pod_message(exc)}; the pod keeps running as it was"
            logger.warning("%s", message)
            self._recorder.record(shadowpod, WARNING, reasons.REASON_POD_RESIZE_REFUSED, message)
            return
        self.forget(key)
        logger.info("resized pod %s in place: %s", name, what)
        self._recorder.record(shadowpod, NORMAL, reasons.REASON_POD_RESIZED, f"Resized pod {name} in place: {what}")
