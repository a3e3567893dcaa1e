"""The enforcer: runs in a remote (provider) cluster and keeps exactly one Pod for each
ShadowPod, recreating it at once when it is deleted or evicted, with no help from the
consumer cluster. It also creates the namespaces consumers ask for and publishes each
consumer's usage and the capacity it may use (the provider side of docs/security.md).

The process wiring sits here: ``cli`` (``kube-offload enforcer``: flags, then the loops
declared to the process manager), ``controller`` (the ShadowPod controller's informers
and workers, and the consumer loops started after it), ``observability`` (metrics and
health), ``crd`` (--install-crd). The work is in three packages, one per concern:

- :mod:`enforcer.shadowpods`: one ShadowPod, one Pod (the reconcile, its writes, its
  Events); the decisions themselves are pure functions in :mod:`kube_offload.shadowpod`.
- :mod:`enforcer.consumers`: the provider side for the *consumer* (the one word for the
  other party; its namespace here is its *tenant namespace*, a name kept from the
  user-facing contract): the namespaces it asks for, what it uses, its published status.
- :mod:`enforcer.admission`: the validating webhooks (ShadowPods, consumers'
  EndpointSlices) and their registration.

A package imports only those listed after it (``admission`` reads ``shadowpods`` and
``consumers``; those two never read each other): the import contract
``enforcer-packages`` in pyproject.toml. Who a consumer is and on what terms
(:mod:`kube_offload.consumers`) and what its pods are charged
(:mod:`kube_offload.consumer_quota`) are pure and in the domain.
"""
