"""The enforcer: runs in a remote (provider) cluster and keeps exactly one Pod for each
ShadowPod, recreating it at once when it is deleted or evicted, with no help from the
consumer cluster.

Modules: ``cli`` (flags, signals), ``controller`` (informers, index, workers),
``reconcile`` (one ShadowPod converged), ``api`` (its writes to the API server),
``events`` (Kubernetes Events), ``podindex`` (pods by owner), ``crd`` (--install-crd).
The decisions themselves are pure functions in :mod:`kube_offload.shadowpod`.
"""
