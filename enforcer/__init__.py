"""The enforcer: runs in a remote (provider) cluster and keeps exactly one Pod for each
ShadowPod, recreating it at once when it is deleted or evicted, with no help from the
consumer cluster. It also creates the namespaces consumers ask for and publishes each
consumer's usage and the capacity it may use (the provider side of docs/security.md).

Modules: ``cli`` (flags, signals), ``controller`` (informers, workers), ``reconcile``
(one ShadowPod converged; the pod informer's index of pods by ShadowPod), ``api`` (its
writes to the API server), ``events`` (Kubernetes Events), ``crd`` (--install-crd).
The decisions themselves are pure functions in :mod:`kube_offload.shadowpod`.

Provider side: ``tenants`` (wiring of the two loops below and their informers),
``twins`` (TwinNamespace reconcile) with ``twin_plan`` (its pure decisions), ``consumers``
(Consumer status loop) with ``consumer_status`` (pure), ``quota`` (a consumer's usage,
shared with the ShadowPod webhook), ``tenancy`` (who a consumer is), ``trim`` (what the
cluster-wide caches keep), ``tenant_api`` (their writes).
"""
