"""The virtual node: one Node of the local cluster standing for
the remote cluster, its status (capacity from what the provider grants, conditions, the
remote cluster's reachability) and its heartbeat Lease kept by ``virtual_node``, every
object and patch built by the pure functions of ``forge``; ``heartbeat`` renews the Lease
on the provider that tells it this consumer is alive. docs/virtual-kubelet.md.
"""
