"""The virtual kubelet: one remote cluster shown as one virtual node of the local cluster,
and the pods bound to that node run there as ShadowPods in twin namespaces, their status
kept true locally.

Modules: ``node``/``node_forge`` (the Node and its Lease), ``remote_resources`` (what the
remote cluster can offer), ``namespaces``/``naming`` (twin namespaces), ``pods`` with
``translation`` and ``status`` (offloading), ``runner`` (wiring and the ``Loop`` extension
point used by ``reflection/``), ``cli``/``settings`` (``kube-offload vkubelet``). See
docs/virtual-kubelet.md.
"""
