"""Remote pod status -> local pod status (pure), written like a kubelet writes its own.

The local pod is what users look at, so it tells the truth about the remote pod, with
the facts that belong to the local cluster kept local:

* phase, conditions (except PodScheduled), container, init-container and ephemeral
  container statuses (their ``resources`` and ``allocatedResources`` too: what the
  remote kubelet gave them), pod IPs, reason and message come from the remote pod (an
  ephemeral container the remote pod does not report keeps what the local pod says of
  it); the resize conditions (``PodResizePending``, ``PodResizeInProgress``) too once the
  provider took the local pod's resize, else the ones that say why not
  (vkubelet/pods/resizes.py);
* restartCount is the remote container's restarts plus the ShadowPod's
  ``status.recreations`` (a remote pod deleted and recreated by the enforcer is a
  restart from the user's point of view), and never goes down;
* PodScheduled stays the local scheduler's (the pod *is* bound to the virtual node;
  remote scheduling trouble is reported as a RemoteUnschedulable Event);
* pod IPs are translated into the remote pod CIDR as the local cluster sees it when a
  remapping is configured (vkubelet/shared/ip_remapping.py); an address outside that range
  is not shown (the reconcile says so once in a Warning Event);
* what the provider writes is bounded (vkubelet/shared/provider_bounds.py): messages and
  reasons in size, conditions to the kubelet's types, container statuses to the local
  pod's containers;
* hostIP is the virtual node's address (the node the pod is bound to, and an address the
  local cluster can reach, unlike the remote node's), qosClass and startTime stay as
  first set;
* a local pod in a terminal phase is never changed again (the API refuses leaving it);
* so a remote pod deleted behind the local cluster's back never gives its terminal phase
  to a local pod that is not being deleted: since Kubernetes 1.27 a kubelet moves every
  pod it deletes to Failed or Succeeded before it goes, and the enforcer recreates it from
  its ShadowPod. Its containers' end (terminated, not ready) is shown, as a kubelet shows
  a container it restarts, and the phase stays what it was until the new pod reports.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from kube_offload.constants import ANNOTATION_EPHEMERAL_NOT_RUN
from kube_offload import pod_resize, views
from kube_offload.views import ShadowPodView
from vkubelet.shared import provider_bounds as bounds
from vkubelet.shared.ip_remapping import NO_REMAPPING, Remapping
from vkubelet.shared.trim import REMOTE_POD_STATUS

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# The phases the Pod API defines; a remote pod reporting another leaves the local phase.
PHASES = frozenset({"Pending", "Running", "Succeeded", "Failed", "Unknown"})
CONDITION_SCHEDULED = "PodScheduled"
# Conditions a kubelet owns: taken from the remote pod, never kept from a stale local copy.
KUBELET_CONDITIONS = bounds.COPIED_CONDITIONS
# The status fields written here; anything else under status is left alone: those taken
# from the remote pod (one list with what the remote pods' cache keeps of their status,
# vkubelet/shared/trim.py), and the local facts.
MANAGED_FIELDS = (*REMOTE_POD_STATUS, "hostIP", "hostIPs")
# Removed when the remote pod no longer has them. Other fields are left as last seen
# while the remote pod has none (a recreated pod has no IP or container statuses for a
# moment; blanking them would only make the local pod flicker).
CLEARABLE_FIELDS = frozenset({"reason", "message"})
# How long the first status write of a local pod may wait while its remote pod is Pending
# (first_write_may_wait): on a quick provider the remote pod is created, bound and started
# within it, and the local pod gets one pods/status write instead of two (issue 39). A
# remote pod still Pending then is mirrored Pending, as before, 5 s later.
FIRST_WRITE_HOLD_SECONDS = 5.0


def recreations_of(shadowpod: Mapping[str, Any] | None) -> int:
    return ShadowPodView(shadowpod).recreations


def desired_status(
    local: Mapping[str, Any],
    remote: Mapping[str, Any],
    shadowpod: Mapping[str, Any] | None,
    host_ip: str,
    pod_ips: Remapping = NO_REMAPPING,
) -> dict[str, Any] | None:
    """The managed status fields the local pod should have; None to leave it as it is.
    ``pod_ips`` translates remote pod addresses into what the local cluster sees."""
    current = local.get("status") or {}
    if current.get("phase") in TERMINAL_PHASES:
        return None
    theirs = remote.get("status") or {}
    recreations = recreations_of(shadowpod)
    spec = local.get("spec") or {}
    status: dict[str, Any] = {}

    phase = theirs.get("phase")
    if phase in PHASES and not (phase in TERMINAL_PHASES and _deleted_behind_our_back(local, remote)):
        status["phase"] = phase
    status["conditions"] = _conditions(current.get("conditions") or [], theirs.get("conditions") or [])
    status["conditions"] += _resize_conditions(current.get("conditions") or [], theirs.get("conditions") or [],
                                               spec, shadowpod)
    # The kubelet's share of its termination messages: 12 KiB over every container.
    message_bytes = bounds.container_message_bytes(
        sum(len(spec.get(field) or []) for field in ("containers", "initContainers", "ephemeralContainers"))
    )
    for field, declared in (("containerStatuses", "containers"), ("initContainerStatuses", "initContainers")):
        copied = bounds.copied_container_statuses(theirs.get(field) or [], spec.get(declared) or [], message_bytes)
        if copied:
            status[field] = _container_statuses(current.get(field) or [], copied, recreations)
    ephemeral = _ephemeral_statuses(current, remote, spec.get("ephemeralContainers") or [], message_bytes)
    if ephemeral:
        status["ephemeralContainerStatuses"] = ephemeral
    reported = remote_pod_ips(remote)
    shown, _outside = bounds.shown_pod_ips(reported, pod_ips)
    if shown:
        status["podIP"] = shown[0]
        status["podIPs"] = [{"ip": address} for address in shown]
    elif reported:
        # Only addresses the local pod must not show: none, rather than the last good one
        # (which the provider may have given another pod since).
        status["podIP"] = status["podIPs"] = None
    status["hostIP"] = host_ip
    status["hostIPs"] = [{"ip": host_ip}]
    start = current.get("startTime") or theirs.get("startTime")
    if start:
        status["startTime"] = start
    for field, limit in (("reason", bounds.REASON_BYTES), ("message", bounds.STATUS_MESSAGE_BYTES)):
        if theirs.get(field):
            status[field] = bounds.truncate_utf8(str(theirs[field]), limit)
    return status


def first_write_may_wait(local: Mapping[str, Any], remote: Mapping[str, Any]) -> bool:
    """Whether the local pod's status write may be held back a moment
    (:data:`FIRST_WRITE_HOLD_SECONDS`) so that its remote pod's creation, binding and start
    become one write (Running) instead of two (Pending with the virtual node's address,
    then Running): nothing is mirrored on the local pod yet (no ``hostIP``: every mirror
    write sets it), the remote pod is still Pending, and neither pod is being deleted.
    Anything else - a pod that runs, ended, or is going, and every later change - is
    written at once; the hold only ever delays a Pending pod's first mirror."""
    if (local.get("status") or {}).get("hostIP"):
        return False
    if (local.get("metadata") or {}).get("deletionTimestamp") or (remote.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return ((remote.get("status") or {}).get("phase") or "Pending") == "Pending"


def _deleted_behind_our_back(local: Mapping[str, Any], remote: Mapping[str, Any]) -> bool:
    """The remote pod is being deleted while the local one is not: not the end of the pod."""
    return bool((remote.get("metadata") or {}).get("deletionTimestamp")) and \
        not (local.get("metadata") or {}).get("deletionTimestamp")


def remote_pod_ips(remote: Mapping[str, Any]) -> list[str]:
    """Every address the remote pod reports (podIP and podIPs), once each."""
    theirs = remote.get("status") or {}
    addresses = [theirs.get("podIP")] + [entry.get("ip") for entry in theirs.get("podIPs") or []]
    return list(dict.fromkeys(str(a) for a in addresses if a))


def status_patch(local: Mapping[str, Any], desired: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A merge patch for pods/status turning the local status into ``desired``; None
    when they already agree."""
    if desired is None:
        return None
    current = local.get("status") or {}
    changes: dict[str, Any] = {}
    for field in MANAGED_FIELDS:
        if field in desired:
            if _normal(current.get(field)) != _normal(desired[field]):
                changes[field] = desired[field]
        elif field in CLEARABLE_FIELDS and current.get(field) is not None:
            changes[field] = None
    if not changes:
        return None
    meta = local.get("metadata") or {}
    # Conditional on the version the status was computed from: restartCount only goes up
    # from what the cache showed, so a stale cache must fail (409) rather than overwrite.
    return {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": changes}


def failed_status(local: Mapping[str, Any], reason: str, message: str, now: str) -> dict[str, Any] | None:
    """The managed status fields of a pod that cannot run here any more (its namespace
    stopped being offloaded to this cluster and its remote pod is gone), as a kubelet
    rejects a pod it cannot admit: phase Failed, containers terminated, not ready. Its
    controller (ReplicaSet, Job...) then replaces it, wherever the policy now says.
    None if the pod already ended."""
    current = local.get("status") or {}
    if current.get("phase") in TERMINAL_PHASES:
        return None
    status: dict[str, Any] = {"phase": "Failed", "reason": reason, "message": message}
    conditions = []
    for cond in current.get("conditions") or []:
        cond = dict(cond)
        if cond.get("type") in ("Ready", "ContainersReady") and cond.get("status") != "False":
            cond.update(status="False", reason="PodFailed", lastTransitionTime=now)
        conditions.append(cond)
    status["conditions"] = conditions
    for field in ("containerStatuses", "initContainerStatuses"):
        if current.get(field):
            status[field] = [_terminated(container, reason, now) for container in current[field]]
    return status


def _terminated(container: Mapping[str, Any], reason: str, now: str) -> dict[str, Any]:
    state = container.get("state") or {}
    if "terminated" in state:
        return copy.deepcopy(dict(container))
    started = (state.get("running") or {}).get("startedAt")
    terminated: dict[str, Any] = {"exitCode": 137, "reason": reason, "finishedAt": now}
    if started:
        terminated["startedAt"] = started
    return {**copy.deepcopy(dict(container)), "state": {"terminated": terminated}, "ready": False, "started": False}


def remote_unschedulable(remote: Mapping[str, Any]) -> str | None:
    """The remote scheduler's message when it cannot place the pod, else None."""
    for condition in (remote.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == CONDITION_SCHEDULED
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "the remote scheduler found no node for the pod")
    return None


def _conditions(local: list[dict[str, Any]], remote: list[dict[str, Any]]) -> list[dict[str, Any]]:
    result = [copy.deepcopy(cond) for cond in local if cond.get("type") == CONDITION_SCHEDULED]
    remote_types = set()
    # The kubelet's conditions only: any other type the provider sets (posing as a local
    # readiness gate, or a DisruptionTarget of a pod the enforcer recreates) is not ours.
    for cond in bounds.copied_conditions(remote):
        remote_types.add(cond.get("type"))
        # observedGeneration counts the remote pod's generations, not the local pod's.
        result.append({k: v for k, v in cond.items() if k != "observedGeneration"})
    for cond in local:
        kind = cond.get("type")
        # e.g. DisruptionTarget set by a local eviction: not ours to remove.
        if kind != CONDITION_SCHEDULED and kind not in remote_types and kind not in KUBELET_CONDITIONS \
                and kind not in pod_resize.RESIZE_CONDITIONS:
            result.append(copy.deepcopy(cond))
    return result


def _resize_conditions(local: list[dict[str, Any]], remote: list[dict[str, Any]], spec: Mapping[str, Any],
                       shadowpod: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The resize conditions (kube_offload/pod_resize.py): the remote kubelet's once the
    ShadowPod's template has the local pod's resources, else the ones the resize step
    wrote (vkubelet/pods/resizes.py: why the provider did not take it)."""
    template = (views.pod_template(shadowpod) or {}).get("spec") or {} if shadowpod is not None else None
    is_carried = template is None or pod_resize.carried(spec, template)
    theirs = [bounds.bounded_condition(c) for c in remote if isinstance(c, Mapping) and c.get("type") in pod_resize.RESIZE_CONDITIONS]
    return pod_resize.local_conditions(local, theirs, is_carried=is_carried)


def _container_statuses(local: list[dict[str, Any]], remote: list[dict[str, Any]], recreations: int) -> list[dict[str, Any]]:
    before = {status.get("name"): status for status in local}
    result = []
    for status in remote:
        mapped = copy.deepcopy(status)
        previous = int((before.get(status.get("name")) or {}).get("restartCount") or 0)
        mapped["restartCount"] = max(previous, int(status.get("restartCount") or 0) + recreations)
        result.append(mapped)
    return result


def _ephemeral_statuses(current: Mapping[str, Any], remote: Mapping[str, Any], declared: list[Any],
                        message_bytes: int) -> list[dict[str, Any]]:
    """The local pod's ephemeral container (kubectl debug) statuses: the remote pod's, as
    it reports them; for one it does not report, what the local pod shows (the vkubelet's
    own word that the provider refuses it: vkubelet/pods/debugging.py), except that one
    the remote pod will never run (it replaced the pod it ran in, and an ephemeral
    container is never restarted) is shown terminated."""
    copied = {s["name"]: s for s in bounds.copied_container_statuses(
        (remote.get("status") or {}).get("ephemeralContainerStatuses") or [], declared, message_bytes)}
    before = {s.get("name"): s for s in current.get("ephemeralContainerStatuses") or [] if isinstance(s, Mapping)}
    not_run = set(str(((remote.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_EPHEMERAL_NOT_RUN) or "").split(","))
    result = []
    for container in declared:
        name = container.get("name") if isinstance(container, Mapping) else None
        if name in copied:
            result.append(copied[name])
        elif name in not_run:
            result.append(_not_run_again(before.get(name), container, (remote.get("status") or {}).get("startTime")))
        elif name in before:
            result.append(copy.deepcopy(dict(before[name])))
    return result


def _not_run_again(status: Mapping[str, Any] | None, container: Mapping[str, Any], replaced_at: Any) -> dict[str, Any]:
    """The status of an ephemeral container whose pod the provider replaced: ended."""
    state = (status or {}).get("state") or {}
    if "terminated" in state:
        return copy.deepcopy(dict(status or {}))
    terminated: dict[str, Any] = {
        "exitCode": 137, "reason": "PodReplaced",
        "message": "the remote pod it ran in was replaced; an ephemeral container is never restarted",
    }
    started = (state.get("running") or {}).get("startedAt")
    if started:
        terminated["startedAt"] = started
    if replaced_at:
        terminated["finishedAt"] = replaced_at
    return {"name": container.get("name"), "image": container.get("image") or "", "imageID": "", "ready": False,
            "restartCount": 0, "state": {"terminated": terminated}}


def _normal(value: Any) -> Any:
    """Absent, null and empty read alike; null-valued keys inside are ignored."""
    if isinstance(value, Mapping):
        cleaned = {k: _normal(v) for k, v in value.items() if v is not None}
        return cleaned or None
    if isinstance(value, list):
        return [_normal(v) for v in value] or None
    return None if value == "" else value


def _milestones(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a user waits for on a pod: its phase, whether it is ready, whether it is
    going, and how often its containers restarted."""
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    restarts = tuple(
        int(s.get("restartCount") or 0)
        for field in ("initContainerStatuses", "containerStatuses")
        for s in status.get(field) or []
    )
    going = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return status.get("phase") or "", ready, going, restarts


def worth_hurrying(event: str, old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether a remote pod's watch event should be mirrored ahead of new pods waiting to be
    offloaded (the work queue's fast lane): the pod's milestones changed (running, ready,
    ended, restarted, being deleted) or it is gone. Its first sighting while Pending and
    its in-between changes (scheduled, initialised) wait in line and fold into the next
    status write, which keeps the local status writes per pod near one in a burst."""
    if event == "DELETED":
        return True
    if old is None:
        return (_milestones(new)[0] or "Pending") != "Pending"
    if old is new:
        return False  # a resync: nothing new
    return _milestones(old) != _milestones(new)
