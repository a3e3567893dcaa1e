"""Names reflection gives what it writes (vkubelet/shared/names.py)."""

from kube_offload import constants as c
from vkubelet.shared import names as n


def test_field_manager_names_the_virtual_node_within_the_api_limit():
    assert n.field_manager("kube-offload-remote-1") == "kube-offload/kube-offload-remote-1"
    assert n.field_manager("x").startswith(c.REFLECTION_FIELD_MANAGER_PREFIX)
    assert len(n.field_manager("x" * 300)) == n.FIELD_MANAGER_MAX_LENGTH
