"""Admission webhook: mutates pods of offloaded namespaces (virtual-node toleration, node
affinity from the placement policy, optional schedulerName) and validates the policy
labels of namespaces.

Modules: ``admission`` (AdmissionReview envelope), ``mutation`` (the pod patch, pure),
``review`` (per-route decisions), ``namespace_cache`` (where policies come from), ``app``
(the WSGI routes), ``server`` (gunicorn over TLS), ``registration`` (webhook configurations),
``cli`` (``kube-offload webhook``). See docs/webhook.md.
"""
