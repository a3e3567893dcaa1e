"""kube-offload shared package: the contract constants, the namespace policy model, the
list/watch/work-queue machinery and the CLI that several components need. Component
packages: webhook, extender, vkubelet, enforcer, certs. The development harness (loopback
clusters, binary builder, demo) lives apart, in harness/ (kube_offload_harness).
"""

__version__ = "0.1.0"
