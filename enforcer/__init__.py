"""The enforcer: runs in a remote (provider) cluster and keeps exactly one Pod for each
ShadowPod, recreating it at once when it is deleted or evicted, with no help from the
consumer cluster. It also creates the namespaces consumers ask for and publishes each
consumer's usage and the capacity it may use (the provider side of docs/security.md).

Modules: ``cli`` (flags, signals), ``controller`` (informers, workers), ``reconcile``
(one ShadowPod converged; the pod informer's index of pods by ShadowPod), ``api`` (its
writes to the API server), ``events`` (Kubernetes Events), ``crd`` (--install-crd).
The decisions themselves are pure functions in :mod:`kube_offload.shadowpod`.

Provider side, for the *consumer* (the one word for the other party; its namespace here is
its *tenant namespace*, a name kept from the user-facing contract): ``consumer_loops``
(wiring of the two loops below and their informers), ``twins`` (TwinNamespace reconcile)
with ``twin_plan`` (its pure decisions), ``consumer_status_loop`` (Consumer status loop)
with ``consumer_status`` (pure), ``quota`` (a consumer's usage, shared with the ShadowPod
webhook), ``trim`` (what the cluster-wide caches keep), ``tenant_api`` (their writes).
Who a consumer is and on what terms (:mod:`kube_offload.consumers`) and what its pods are
charged (:mod:`kube_offload.consumer_quota`) are pure and in the domain.
"""
