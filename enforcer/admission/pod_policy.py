"""The provider policy's pod rules, as the ShadowPod webhook words them (pure; part of the
webhook's spec rules, :mod:`enforcer.admission.validation`, which also judge every pod the
enforcer creates).

The rules themselves are the rule book's (:mod:`kube_offload.rule_book`, one predicate per
``Consumer spec.policy`` key, :mod:`kube_offload.pod_rules`), from which the consumer's virtual
kubelet derives what it drops before sending: here they judge a ShadowPod's template
(``spec.pod``), one line per problem naming the field (``spec.pod.spec...``), what is wrong,
the key that would grant it (or that none can) and the fix. The rules the provider does not
refuse by but sets on the pod it makes (``pods.remoteAPIAccess``, the termination grace:
:func:`kube_offload.shadowpod.build_pod`) are not here, nor the quota mode's limits (a 403,
:func:`enforcer.admission.quota_rules.missing_limits`).

Malformed shapes raise :class:`Invalid` (the template is not a PodSpec), as in
:mod:`enforcer.admission.validation`.
"""

from __future__ import annotations

from typing import Any, Mapping

from kube_offload import provider_policy as pp
from kube_offload import rule_book
from kube_offload.policy_rules import Context, Kind, Malformed, Violation, mapping, refusal_lines
from kube_offload.provider_policy import ProviderPolicy

TEMPLATE = "spec.pod."


class Invalid(ValueError):
    """The template does not have the shape of a PodSpec; names the field."""


def template_violations(spec: Mapping[str, Any], metadata: Mapping[str, Any], ctx: Context, *, keys: tuple[str, ...] | None = None,
                        without: tuple[str, ...] = ()) -> list[Violation]:
    """The violations of the pod rules the provider refuses by (those of ``keys`` only, when
    given; never those of ``without``); :class:`Invalid` for a template that is no PodSpec."""
    pod = {"metadata": metadata, "spec": spec}
    try:
        return [v for rule in rule_book.rules_for(Kind.POD, refused_by_provider=True)
                if (keys is None or rule.key in keys) and rule.key not in without
                for v in rule.check(pod, ctx)]
    except Malformed as exc:
        raise Invalid(f"{TEMPLATE}{exc}") from None


def policy_problems(spec: Mapping[str, Any], metadata: Mapping[str, Any], policy: ProviderPolicy, consumer_id: str,
                    namespace: str) -> list[str]:
    """Every way the pod template (``spec``, ``metadata``) goes beyond ``policy``, one line each."""
    ctx = Context(policy=policy, consumer_id=consumer_id, namespace=namespace)
    return refusal_lines(template_violations(spec, metadata, ctx, without=(pp.QUOTA_MODE_KEY,)), TEMPLATE)


# --- reading the template ------------------------------------------------------------------------
def field_mapping(parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    """``parent[key]`` as an object ({} when absent), or Invalid naming ``path.key``: the rule
    book's reader (:func:`kube_offload.policy_rules.mapping`) under the webhook's error
    (enforcer.admission.validation reads the same template)."""
    try:
        return mapping(parent, key, path)
    except Malformed as exc:
        raise Invalid(str(exc)) from None
