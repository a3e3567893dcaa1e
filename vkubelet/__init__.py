"""The virtual kubelet: one remote cluster shown as one virtual node of the local cluster,
and the pods bound to that node run there as ShadowPods in twin namespaces, their status
kept true locally.

Modules: ``node``/``node_forge`` (the Node and its Lease), ``namespaces``/``naming`` (twin
namespaces), ``pods`` with ``translation`` and ``status`` (offloading), ``runner`` (wiring
and the ``Loop`` extension point used by ``reflection/``), ``cli``/``settings``
(``kube-offload vkubelet``). See docs/virtual-kubelet.md. What the remote cluster can offer is computed by
:mod:`kube_offload.remote_resources`, shared with the enforcer.
"""
