"""Names the virtual kubelet gives things: the virtual node and the twin namespaces.

They are facts of the contract, written once in :mod:`kube_offload.constants` (the kubectl
plugin, the enforcer's docs and the harness compute the same names); this module keeps
the path the vkubelet's modules and tests import them by.
"""

from __future__ import annotations

from kube_offload.constants import twin_namespace_name as twin_namespace_name
from kube_offload.constants import virtual_node_name as virtual_node_name
