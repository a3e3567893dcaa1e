"""kube-offload shared package: the contract constants, the namespace policy model, the
list/watch/work-queue machinery and the tools (CLI, binaries, loopback clusters) that
several components need. Component packages: webhook, extender, vkubelet, enforcer, certs.
"""

__version__ = "0.1.0"
