"""Whether a consumer may write this ShadowPod here: the static half of the ShadowPod
validating webhook, as pure functions (no I/O, table-tested in tests/unit).

The checks, in order (docs/enforcer.md "ShadowPod validation"), after two that come
before all: the consumer may not add finalizers (:mod:`enforcer.admission.quota_rules`),
and nobody may change the spec of a ShadowPod whose status is terminal (its run ended:
:func:`terminal_spec_change`); the first that fails decides, except the spec rules (3-9), which are all reported at once (one line each) so
one round trip shows everything to fix:

1. the namespace is a twin the enforcer made (``managed-by=enforcer``) of a Consumer;
2. the request's user is that Consumer's ServiceAccount;
3. ``spec.pod.metadata.labels[origin-cluster-id]`` is that consumer's id, and the offload
   chain annotation (:mod:`kube_offload.offload_chain`) parses, ends with that consumer's id
   and does not hold this provider's own (``--cluster-id``): a loop of peerings is refused
   with a message naming the chain (a -> b -> a);
4. no hostNetwork / hostPID / hostIPC,
5. no privileged (or Windows HostProcess) container,
6. no capability added beyond the consumer's Pod Security level - rules 4-6 are the Pod
   Security ``baseline`` rules, so a consumer the provider put at level ``privileged``
   is spared them;
7. the pod rules of the consumer's provider policy (``Consumer spec.policy``,
   :mod:`enforcer.admission.pod_policy`), at every level: priority class, tolerations, node
   selection, volume kinds (hostPath never: once a baseline rule here, now the policy's),
   runtime class, label and annotation keys;
8. no ``nodeName`` (the provider's scheduler places pods; a pinned pod would bypass it);
9. ``serviceAccountName`` is ``default`` or a ServiceAccount of that namespace the
   consumer reflected (labelled with its origin);
10. a cordoned or drained consumer (``spec.cordoned``, ``spec.drain``) creates nothing and may not
    raise requests by an update: judged before the quota, since freeing quota does not end it
    (a drained consumer over quota is told about the drain);
11. the consumer's usage plus what this request adds stays within ``spec.quota`` for every
    resource listed there (absent = unlimited; ``pods`` counts pods; keys and what counts:
    :mod:`enforcer.consumers.quota`), every container sets the limits the quota counts (equal to
    its requests under quota mode ``hard``), and an
    update lowers no request or limit (:mod:`enforcer.admission.quota_rules`; the running pod keeps
    its old ones; reported with rules 3-9, as a 422);

The same rules 3-11 judge every pod the enforcer creates, the first and each recreation,
against the Consumer as it is then (:func:`judge_pod_create`).

What these rules do not cover (the rest of Pod Security, LimitRanges, ResourceQuotas,
the Pod's own validation) the provider's API server decides, through a dry-run create of
the very Pod the enforcer would make (:mod:`enforcer.admission.dry_run`).

Refusals: 403 Forbidden for who may write where (1, 2), for a Consumer whose spec does
not parse (the provider's mistake) and for cordon, drain and quota (as the apiserver's own
ResourceQuota does), 422 Invalid for the spec (3-9). Every message names
the field and says how to fix it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Mapping

from enforcer.admission import pod_policy, quota_rules
from enforcer.admission.pod_policy import Invalid, field_mapping as _mapping
from enforcer.consumers.quota import live_shadowpod, shadowpod_requests, twin_owner
from kube_offload.consumer_quota import pod_charges
from kube_offload import constants as c
from kube_offload import ephemeral_containers, offload_chain
from kube_offload.admission import AdmissionRequest, Decision, GroupVersionKind, UserInfo
# The Consumer's terms and the quota check are the domain's (kubectl offload explain asks them too).
from kube_offload.consumers import ConsumerError, ConsumerTerms, consumer_terms, quota_excess  # noqa: F401  (re-exported)
from kube_offload.resources import (
    TERMINATED_PHASES,
    QuantityError,
    ResourceList,
    format_quantity,
    resource_sort_key,
    uses_binary_format,
)
from kube_offload.policy_rules import Malformed, items
from kube_offload.views import pod_template

POD_SPEC = "spec.pod.spec"
POD_LABELS = "spec.pod.metadata.labels"
SHADOWPOD_GVK = GroupVersionKind(group=c.SHADOWPOD_GROUP, version=c.SHADOWPOD_VERSION, kind=c.SHADOWPOD_KIND)

LEVEL_PRIVILEGED, LEVEL_BASELINE, LEVEL_RESTRICTED = c.PSA_LEVELS
# Pod Security Standards: the capabilities a container may add at each level
# (baseline: the container runtime's default set; restricted: NET_BIND_SERVICE only).
# Compared as the apiserver's Pod Security admission does: exact names, no CAP_ prefix.
ALLOWED_CAPABILITIES: dict[str, frozenset[str] | None] = {
    LEVEL_PRIVILEGED: None,  # anything
    LEVEL_BASELINE: frozenset(
        {
            "AUDIT_WRITE",
            "CHOWN",
            "DAC_OVERRIDE",
            "FOWNER",
            "FSETID",
            "KILL",
            "MKNOD",
            "NET_BIND_SERVICE",
            "SETFCAP",
            "SETGID",
            "SETPCAP",
            "SETUID",
            "SYS_CHROOT",
        }
    ),
    LEVEL_RESTRICTED: frozenset({"NET_BIND_SERVICE"}),
}
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
CONTAINER_FIELDS = ("initContainers", "containers", "ephemeralContainers")
DEFAULT_SERVICE_ACCOUNT = "default"

ServiceAccountLookup = Callable[[str], "Mapping[str, Any] | None"]
"""ServiceAccount name -> that ServiceAccount in the request's namespace, or None."""


# --- the decision -----------------------------------------------------------------------------
def decide(
    request: AdmissionRequest,
    *,
    namespace: Mapping[str, Any] | None,
    consumer: Mapping[str, Any] | None,
    usage: Mapping[str, int],
    service_account: ServiceAccountLookup,
    cluster_id: str = "",
) -> Decision:
    """Allow, or refuse with the first failing rule's message (see the module docstring).

    ``namespace`` is the request's Namespace object (None: unknown); ``consumer`` the
    Consumer its origin label names (None: none); ``usage`` that consumer's current use in
    milli-units, the old object of an UPDATE included; ``service_account`` looks up a
    ServiceAccount of the request's namespace by name; ``cluster_id`` is this provider's
    own cluster id ("" when not configured: no loop check, the rest of rule 3 applies).
    """
    if request.operation not in ("CREATE", "UPDATE") or request.sub_resource:
        return Decision.allow()
    new = request.object or {}
    # Before the metadata-only shortcut: a finalizer is metadata (enforcer.admission.quota_rules).
    finalizer_problem = quota_rules.finalizer_problem(request, namespace=namespace, consumer=consumer)
    if finalizer_problem:
        return _forbidden(finalizer_problem)
    if request.operation == "UPDATE" and request.old_object is not None and spec_unchanged(request):
        # Only metadata changed: finalizers or owner references (the garbage collector and
        # the enforcer make such updates while deleting), labels, annotations. Nothing the
        # Pod is made from, and blocking these would leave deletions hanging.
        return Decision.allow()

    terminal = terminal_spec_change(request)
    if terminal:
        return _invalid([terminal])

    ns_name = request.namespace or str((new.get("metadata") or {}).get("namespace") or "")
    owner, terms, refused = _terms(namespace, consumer, ns_name)
    if refused is not None:
        return refused
    assert owner is not None and terms is not None

    username = request.user_info.username
    if username != terms.username:
        return _forbidden(
            f'user "{username}" may not write ShadowPods in namespace "{ns_name}": it belongs to consumer '
            f'"{owner}", and only that consumer\'s identity may'
        )
    # Of the template's ephemeral containers (kubectl debug), only those this request adds
    # are judged: the others were judged when they came (kube_offload/ephemeral_containers.py).
    judged = dataclasses.replace(request, object=dict(ephemeral_containers.admission_view(new, request.old_object)))
    return _template_decision(judged, terms=terms, owner=owner, ns_name=ns_name, usage=usage,
                              service_account=service_account, cluster_id=cluster_id, new_shadowpod=True)


def judge_pod_create(
    shadowpod: Mapping[str, Any],
    *,
    namespace: Mapping[str, Any] | None,
    consumer: Mapping[str, Any] | None,
    usage: Mapping[str, int],
    service_account: ServiceAccountLookup,
    cluster_id: str = "",
) -> Decision:
    """Whether the enforcer may create a pod for ``shadowpod`` now, its first or any later
    one (docs/enforcer.md "Every pod is judged"): the rules :func:`decide` applies to a
    CREATE of the ShadowPod by its consumer (3-11), against the Consumer as it is now, so
    a grant the provider took back since the ShadowPod was admitted (a toleration, a
    priority class, a runtime class, a volume kind, a lowered quota, a drain) is not
    brought back by the next recreation, which the consumer can trigger at will.

    Unlike an admission: nobody writes anything (no user, finalizer or lowering rule), and
    a cordon refuses nothing (the ShadowPod exists; a cordon stops new ones, and its pod
    runs on); a drain does (drain takes the provider's resources back). ``usage`` is the
    consumer's use *without* this ShadowPod: its own charges are what is judged."""
    meta = shadowpod.get("metadata") or {}
    ns_name = str(meta.get("namespace") or "")
    owner, terms, refused = _terms(namespace, consumer, ns_name)
    if refused is not None:
        return refused
    assert owner is not None and terms is not None
    request = pod_create_request(shadowpod, terms.username)
    return _template_decision(request, terms=terms, owner=owner, ns_name=ns_name, usage=usage,
                              service_account=service_account, cluster_id=cluster_id, new_shadowpod=False)


def pod_create_request(shadowpod: Mapping[str, Any], username: str = "") -> AdmissionRequest:
    """The CREATE of ``shadowpod`` by ``username``, as it stands and live (its status, which
    may record an earlier pod, is not what is judged): how the rules that read a request
    judge the pod the enforcer is about to make."""
    meta = shadowpod.get("metadata") or {}
    live = {key: value for key, value in shadowpod.items() if key != "status"}
    return AdmissionRequest(
        uid="", api_version="admission.k8s.io/v1", kind=SHADOWPOD_GVK, operation="CREATE",
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""), sub_resource="",
        object=live, old_object=None, dry_run=False, user_info=UserInfo(username=username),
    )


def terminal_spec_change(request: AdmissionRequest) -> str:
    """Why an UPDATE may not change the spec of a ShadowPod whose status is terminal, or
    "": its run ended (the status records the pod that ran), it holds and is charged
    nothing, and a new spec would be judged against nothing (no usage to compare, no
    request to lower) yet could be run again by the enforcer. A new run is a new ShadowPod."""
    old = request.old_object
    if request.operation != "UPDATE" or old is None or spec_unchanged(request):
        return ""
    phase = (old.get("status") or {}).get("phase")
    if phase not in TERMINATED_PHASES:
        return ""
    return (
        f"spec: immutable once the ShadowPod's status.phase is {phase} (its pod finished its run; a finished "
        "ShadowPod holds and is charged nothing, so a changed spec could never be judged against the quota); "
        "to run it again, delete the ShadowPod and create a new one"
    )


def _terms(namespace: Mapping[str, Any] | None, consumer: Mapping[str, Any] | None, ns_name: str) -> tuple[str | None, ConsumerTerms | None, Decision | None]:
    """Rule 1 and the Consumer's terms: (owner, terms, None), or the refusal."""
    owner = twin_owner(namespace)
    if owner is None:
        return None, None, _forbidden(
            f'namespace "{ns_name}" is not a twin namespace made by the enforcer (no label '
            f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY_ENFORCER} and {c.LABEL_ORIGIN_CLUSTER_ID}); ShadowPods are "
            "admitted only in twin namespaces, which a consumer asks for with a TwinNamespace in its tenant namespace"
        )
    if consumer is None:
        return owner, None, _forbidden(
            f'namespace "{ns_name}" is a twin of consumer "{owner}", which this provider does not admit '
            f'(no Consumer "{owner}"); ask the provider to create it'
        )
    try:
        terms = consumer_terms(consumer)
    except ConsumerError as exc:
        return owner, None, _forbidden(
            f'Consumer "{owner}" is misconfigured ({exc}); the provider must fix it before ShadowPods are admitted'
        )
    return owner, terms, None


def _template_decision(
    request: AdmissionRequest,
    *,
    terms: ConsumerTerms,
    owner: str,
    ns_name: str,
    usage: Mapping[str, int],
    service_account: ServiceAccountLookup,
    cluster_id: str,
    new_shadowpod: bool,
) -> Decision:
    """Rules 3-11 for the ShadowPod ``request`` writes (or, ``new_shadowpod`` False, whose
    pod the enforcer is about to create: then a cordon refuses nothing)."""
    new = request.object or {}
    try:
        problems = _origin_problems(new, owner, ns_name)
        problems += [
            f"spec.pod.metadata.annotations[{c.ANNOTATION_OFFLOAD_CHAIN}]: {problem}"
            for problem in offload_chain.admission_problems(
                _mapping(_pod_metadata(new), "annotations", "spec.pod.metadata"), owner, cluster_id
            )
        ]
        spec = _pod_spec(new)
        problems += _spec_problems(spec, terms, ns_name, service_account)
        problems += pod_policy.policy_problems(spec, _pod_metadata(new), terms.policy, terms.consumer_id, ns_name)
        problems += quota_rules.lowered_resources(request)
        if problems:
            return _invalid(problems)
        delta = requests_delta(request)
    except Invalid as exc:
        return _invalid([str(exc)])

    # Rule 10 before the quota (11): a drain or a cordon does not end when quota frees up,
    # so a consumer that is both over quota and drained is told the reason that stays.
    if terms.draining or (terms.cordoned and new_shadowpod):
        if terms.draining:
            state, until = "drained", "the provider undrains it (kube-offload undrain, which removes Consumer spec.drain)"
        else:
            state, until = "cordoned", "the provider sets Consumer spec.cordoned=false"
        if request.operation == "CREATE":
            if not new_shadowpod:
                return _forbidden(
                    f'consumer "{owner}" is {state} by the provider: no pod is made for its ShadowPods '
                    f"(the drain takes the provider's resources back) until {until}"
                )
            keep = "existing ones are removed when the drain's grace ends" if terms.draining else "existing ones keep running"
            return _forbidden(
                f'consumer "{owner}" is {state} by the provider: no new ShadowPods are admitted '
                f"({keep}) until {until}"
            )
        raised = sorted((name for name, amount in delta.items() if amount > 0), key=resource_sort_key)
        if raised:
            return _forbidden(
                f'consumer "{owner}" is {state} by the provider: an update may not raise requests '
                f"(this one raises {', '.join(raised)})"
            )
    unbounded = quota_rules.missing_limits(request, terms.quota, owner, terms.policy.quota_mode)
    if unbounded:
        return _forbidden("\n".join(unbounded))
    exceeded = quota_excess(terms.quota, usage, delta)
    if exceeded:
        added = "requested" if request.operation == "CREATE" else "added by this update"
        details = "; ".join(
            f"{name}: {added} {_q(name, more)}, used {_q(name, used)}, quota {_q(name, limit)}"
            for name, more, used, limit in exceeded
        )
        return _forbidden(
            f'exceeded quota of consumer "{owner}": {details}; wait until other ShadowPods of this consumer end, '
            "or ask the provider to raise Consumer spec.quota"
        )
    return Decision.allow()


def spec_unchanged(request: AdmissionRequest) -> bool:
    return (request.object or {}).get("spec") == (request.old_object or {}).get("spec")


def requests_delta(request: AdmissionRequest) -> ResourceList:
    """What this request adds to its consumer's usage, per resource, in milli-units: the
    new object's requests (``pods`` = 1000), minus the old object's on an UPDATE. An
    object that no longer holds resources (being deleted, Succeeded/Failed) counts zero.
    Raises :class:`Invalid` when the new object's quantities do not parse."""
    new = request.object or {}
    delta: ResourceList = {}
    if live_shadowpod(new):
        try:
            delta = pod_charges(pod_template(new) or {})
        except QuantityError as exc:
            raise Invalid(f"{POD_SPEC}: {exc}") from None
    old = request.old_object
    if request.operation == "UPDATE" and old is not None and live_shadowpod(old):
        for name, amount in shadowpod_requests(old).items():
            delta[name] = delta.get(name, 0) - amount
    return delta


# --- the rules ----------------------------------------------------------------------------------
def _origin_problems(shadowpod: Mapping[str, Any], owner: str, ns_name: str) -> list[str]:
    problems = []
    pod = _mapping((shadowpod.get("spec") or {}), "pod", "spec")
    labels = _mapping(_mapping(pod, "metadata", "spec.pod"), "labels", "spec.pod.metadata")
    got = labels.get(c.LABEL_ORIGIN_CLUSTER_ID)
    if got != owner:
        problems.append(
            f"{POD_LABELS}[{c.LABEL_ORIGIN_CLUSTER_ID}]: must be {owner!r} (the consumer namespace "
            f'"{ns_name}" belongs to), {"is missing" if got is None else f"got {got!r}"}'
        )
    own = ((shadowpod.get("metadata") or {}).get("labels") or {}).get(c.LABEL_ORIGIN_CLUSTER_ID)
    if own is not None and own != owner:
        problems.append(f"metadata.labels[{c.LABEL_ORIGIN_CLUSTER_ID}]: must be {owner!r} or absent, got {own!r}")
    return problems


def _pod_spec(shadowpod: Mapping[str, Any]) -> Mapping[str, Any]:
    pod = _mapping(shadowpod.get("spec") or {}, "pod", "spec")
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise Invalid(f"{POD_SPEC}: must be an object (a PodSpec)")
    return spec


def _pod_metadata(shadowpod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(shadowpod.get("spec") or {}, "pod", "spec"), "metadata", "spec.pod")


def _spec_problems(spec: Mapping[str, Any], terms: ConsumerTerms, ns_name: str, service_account: ServiceAccountLookup) -> list[str]:
    problems: list[str] = []
    level = terms.level
    who = f'consumer "{terms.consumer_id}" (Pod Security level {level})'
    containers = list(_containers(spec))
    baseline_applies = level != LEVEL_PRIVILEGED

    if baseline_applies:
        for field in HOST_NAMESPACES:
            if _flag(spec, field, POD_SPEC):
                problems.append(f"{POD_SPEC}.{field}: host namespaces are not allowed for {who}; remove {field}")

        if _flag(_windows_options(spec, POD_SPEC), "hostProcess", f"{POD_SPEC}.securityContext.windowsOptions"):
            problems.append(
                f"{POD_SPEC}.securityContext.windowsOptions.hostProcess: HostProcess pods are not allowed for {who}; "
                "remove hostProcess"
            )
        for path, container in containers:
            context = _mapping(container, "securityContext", path)
            name = container.get("name")
            if _flag(context, "privileged", f"{path}.securityContext"):
                problems.append(
                    f'{path}.securityContext.privileged: container "{name}" may not be privileged for {who}; '
                    "remove privileged or set it to false"
                )
            if _flag(_windows_options(container, path), "hostProcess", f"{path}.securityContext.windowsOptions"):
                problems.append(
                    f'{path}.securityContext.windowsOptions.hostProcess: container "{name}" may not be a '
                    f"HostProcess container for {who}; remove hostProcess"
                )

    allowed = ALLOWED_CAPABILITIES[level]
    if allowed is not None:
        for path, container in containers:
            field = f"{path}.securityContext.capabilities"
            capabilities = _mapping(_mapping(container, "securityContext", path), "capabilities", f"{path}.securityContext")
            added = capabilities.get("add")
            if added is None:
                continue
            if not isinstance(added, list) or not all(isinstance(item, str) for item in added):
                raise Invalid(f"{field}.add: must be a list of capability names")
            refused = [cap for cap in added if cap not in allowed]
            if refused:
                problems.append(
                    f'{field}.add: container "{container.get("name")}" may not add {", ".join(refused)} for {who}, '
                    f"which allows only {', '.join(sorted(allowed))}; remove {', '.join(refused)}"
                )

    node_name = spec.get("nodeName")
    if node_name not in (None, ""):
        problems.append(
            f"{POD_SPEC}.nodeName: a consumer's pods may not name a node ({node_name!r}): the provider's scheduler "
            "places them; remove nodeName"
        )

    for field in ("serviceAccountName", "serviceAccount"):  # serviceAccount: deprecated alias
        account = spec.get(field)
        if account in (None, "", DEFAULT_SERVICE_ACCOUNT):
            continue
        if not isinstance(account, str):
            raise Invalid(f"{POD_SPEC}.{field}: must be a string")
        found = service_account(account)
        labels = ((found or {}).get("metadata") or {}).get("labels") or {}
        if found is None or labels.get(c.LABEL_ORIGIN_CLUSTER_ID) != terms.consumer_id:
            problems.append(
                f'{POD_SPEC}.{field}: ServiceAccount "{account}" is not one that consumer "{terms.consumer_id}" '
                f'reflected into namespace "{ns_name}"; use "{DEFAULT_SERVICE_ACCOUNT}" or a ServiceAccount '
                f"reflected from the consumer cluster (labelled {c.LABEL_ORIGIN_CLUSTER_ID}={terms.consumer_id})"
            )
    return problems


# --- reading the template ------------------------------------------------------------------------
def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, container) of every container list, read as the rule book reads them
    (:func:`kube_offload.policy_rules.items`), a malformed one :class:`Invalid`."""
    try:
        for field in CONTAINER_FIELDS:
            for index, container in items(spec, field, POD_SPEC):
                yield f"{POD_SPEC}.{field}[{index}]", container
    except Malformed as exc:
        raise Invalid(str(exc)) from None


def _windows_options(owner: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    return _mapping(_mapping(owner, "securityContext", path), "windowsOptions", f"{path}.securityContext")


def _flag(parent: Mapping[str, Any], key: str, path: str) -> bool:
    """True only for a JSON ``true``; anything but a boolean is refused, so a string
    ``"true"`` cannot slip past a check the Pod's own validation would then read."""
    value = parent.get(key)
    if value is None or value is False:
        return False
    if value is True:
        return True
    raise Invalid(f"{path}.{key}: must be true or false")


def _q(name: str, milli: int) -> str:
    return format_quantity(milli, binary=uses_binary_format(name))


def _forbidden(message: str) -> Decision:
    return Decision.deny(403, "Forbidden", message)


def _invalid(problems: list[str]) -> Decision:
    # One line per problem: each already ends with "; <the fix>".
    return Decision.deny(422, "Invalid", "\n".join(problems))
