"""The kube-offload development harness, shipped apart from the product.

Loopback clusters for the demo and the end-to-end tests (``cluster``), the builder of the
control-plane binaries from Go modules (``binaries``, pinned in ``versions``), kwok's
simulation of logs and exec (``kwok_sim``) and the demo. It depends on the product
(``kube_offload`` and the component packages, which it starts as processes); the product
never imports it: ``kube-offload demo|cluster|binaries`` reach it through the
``kube_offload.commands`` entry-point group declared in harness/pyproject.toml.
"""
