"""Pod offloading (loops 4, 6 and 7 of ARCHITECTURE.md): each local pod bound to the
virtual node is run as a ShadowPod in its twin namespace, and its status follows the
remote pod's.

One reconcile per local pod key ``namespace/name``, triggered by the local pod, its
ShadowPod(s), its remote pod and its twin namespace; it reads only caches and converges:

* local pod gone -> every ShadowPod of ours that stood for it is deleted (orphans, e.g.
  after a vkubelet crash between the user's delete and ours);
* local pod terminating -> its ShadowPod asks for the remote pod's end with the local
  deletion's grace period, and is deleted once that pod is gone; once the ShadowPod and
  the remote pod are both gone, the local pod is deleted with grace 0, as a kubelet
  confirms a pod's end (termination.py; unreachable remote cluster: after the grace
  period plus a margin, with a Warning Event);
* remote cluster unreachable (the virtual node NotReady) -> the pod is marked not Ready,
  and Ready again only from a fresh list of the remote pods (readiness.py);
* a DaemonSet pod -> not offloaded unless --offload-daemonset-pods: left Pending with a
  reason (daemonsets.py), so its DaemonSet controller does not churn it;
* otherwise -> exactly one ShadowPod, named like the pod, in the twin namespace, for this
  pod's UID (one for an older pod of the same name is deleted first); what a running pod
  may change (labels, annotations, images, activeDeadlineSeconds, tolerations) follows
  into its template, and from there the enforcer patches the remote pod in place
  (kube_offload/pod_updates.py); the remote pod's status is copied back when it differs.

Deterministic names (same pod name, twin namespace from vkubelet/twins/naming.py) are what make a crash
at any point safe: a second create meets AlreadyExists instead of making a duplicate.

A provider may also revoke our access to one Ready twin (its RoleBinding
``kube-offload-consumer`` deleted): the twin-scoped caches of that namespace are then
empty or stale (kube_offload/runtime/namespaced_informer.py: forbidden), so they prove
no absence. The namespace's pods are left exactly as they are - no ShadowPod created,
none deleted, no status written, no local pod failed or deleted - with one Warning log
line naming the twin and the fix and a Warning Event ``TwinNamespaceForbidden`` on each
pod, until a list there is accepted again; every other namespace carries on.

A provider may refuse a ShadowPod (its webhook, quota, Pod Security: 403/422). The pod
then gets a Warning Event ``ProviderRefused`` with the provider's words, stays Pending
with ``status.reason``/``message`` saying it waits for the provider, and is tried again
with a per-pod exponential backoff (refusals.py); every reconcile in between (informer
events, resyncs, our own status write) is answered without a request.

Before sending, the provider's policy for us (``Consumer.spec.policy``) takes out what its
admission would refuse (translation.py, vkubelet/shared/policy_fit.py): each field changed gets one Warning
Event ``ProviderPolicyAdjusted`` on the local pod once the ShadowPod is created. A pod the
policy refuses whatever is dropped (a volume type it does not grant) is not sent: Warning
Events ``ProviderPolicyRefused`` name the fields, the pod stays Pending with
``status.reason`` ``ProviderRefused``, and it is looked at again when it or the policy
changes. Each note is told once per pod (vkubelet/shared/policy_events.py), not at every resync.

The package, by step: ``reconcile`` (the loop: its watches, the reconcile that picks a
step, status mirroring), ``shadowpods`` (create, update, delete a ShadowPod; a provider's
refusal and its backoff), ``ending`` (a pod that ends: terminating, remote cluster
unreachable, namespace no longer offloaded, DaemonSet pod), ``handback`` (a pod the
remote cluster cannot run, evicted), ``forbidden`` (a twin we may not read), ``local``
(the writes to the local pod: status with its echoes, the final delete, the orphan check
against the API server). The steps are handed the services they use
(``step_context.StepContext``), not the loop. The decisions are pure modules beside them:
``translation`` (local pod -> the pod the remote cluster runs), ``status`` (remote
status -> local, bounded as vkubelet/shared/provider_bounds.py says), ``addresses`` (the
Warning about an address outside the remote pod range, once per pod), ``termination``, ``readiness``, ``refusals``, ``daemonsets``,
``handback_rules`` (when a pod is handed back). What the pod loop shares with the other
loops (the origin marks, the provider's policy fit and its notes, the informers) is in
vkubelet/shared/.
"""
