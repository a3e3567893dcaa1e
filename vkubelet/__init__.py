"""The virtual kubelet: one remote cluster shown as one virtual node of the local cluster,
and the pods bound to that node run there as ShadowPods in twin namespaces, their status
kept true locally.

The process wiring sits here: ``cli`` (``kube-offload vkubelet``: flags, then the loops
declared to the process manager, kube_offload/runtime/manager.py), ``settings`` (the
process's settings, composed of each loop's own), ``runner`` (the informers, the node and
the loops wired together and declared), ``credentials`` (the remote kubeconfig followed
and its token renewed), ``observability`` (metrics and health). The work is in one
package per loop:

- :mod:`vkubelet.pods`: each local pod bound to the node run as one ShadowPod, its
  status mirrored back (translation, status, refusals, termination, handback...);
- :mod:`vkubelet.storage`: the virtual storage class;
- :mod:`vkubelet.reflection`: ConfigMaps, Secrets, Services... copied to the twins,
  Events copied back;
- :mod:`vkubelet.home_api`: offloaded pods reaching their home API server;
- :mod:`vkubelet.kubeletapi`: the node's kubelet API (logs, exec, attach, port-forward);
- :mod:`vkubelet.twins`: the twin namespaces, and where a namespace's pods go;
- :mod:`vkubelet.node`: the Node, its Lease, the heartbeat on the provider;

over :mod:`vkubelet.shared` (the informers, the origin marks, the Event recorder, the
provider's terms and policy fit, what a loop is handed), which imports no loop. A
package imports only those listed after it, and type-only names aside, nothing runs
back up: the import contract ``vkubelet-packages`` in pyproject.toml. See
docs/virtual-kubelet.md and docs/architecture.md. What the remote cluster can offer is
computed by :mod:`kube_offload.remote_resources`, shared with the enforcer.
"""
