"""One ShadowPod, one Pod: ``reconcile`` (one ShadowPod converged, replaced at once when
its pod is lost; the pod informer's index of pods by ShadowPod), ``api`` (its writes to
the provider's API server, and a refused pod write told in ShadowPod terms), ``events``
(the Kubernetes Events it records). The decisions are :mod:`kube_offload.shadowpod`'s
(pure); the wiring is :mod:`enforcer.controller`'s.
"""
