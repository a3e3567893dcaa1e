"""The scheduler extender's decisions: pure, so they live in the domain
(:mod:`kube_offload.node_filter`), where ``kubectl offload explain`` asks them too; this
module keeps the extender's import path (``from extender import core``).
"""

from __future__ import annotations

from kube_offload import capacity as cap  # noqa: F401  (tests read core.cap.CapacityError)
from kube_offload.node_filter import CAPACITY_INVALID as CAPACITY_INVALID
from kube_offload.node_filter import CAPACITY_MISSING as CAPACITY_MISSING
from kube_offload.node_filter import CAPACITY_STALE as CAPACITY_STALE
from kube_offload.node_filter import CapacityReader as CapacityReader
from kube_offload.node_filter import DEFAULT_CAPACITY_MAX_AGE as DEFAULT_CAPACITY_MAX_AGE
from kube_offload.node_filter import DEFAULT_READER as DEFAULT_READER
from kube_offload.node_filter import DEFAULT_STRATEGY as DEFAULT_STRATEGY
from kube_offload.node_filter import FilterResult as FilterResult
from kube_offload.node_filter import InvalidPolicy as InvalidPolicy
from kube_offload.node_filter import MAX_EXTENDER_PRIORITY as MAX_EXTENDER_PRIORITY
from kube_offload.node_filter import MIN_EXTENDER_PRIORITY as MIN_EXTENDER_PRIORITY
from kube_offload.node_filter import NodeFailure as NodeFailure
from kube_offload.node_filter import NodeLookup as NodeLookup
from kube_offload.node_filter import PolicyLookup as PolicyLookup
from kube_offload.node_filter import REASON_CAPACITY as REASON_CAPACITY
from kube_offload.node_filter import REASON_HANDED_BACK as REASON_HANDED_BACK
from kube_offload.node_filter import REASON_INVALID_POLICY as REASON_INVALID_POLICY
from kube_offload.node_filter import REASON_NOT_READY as REASON_NOT_READY
from kube_offload.node_filter import REASON_PLACEMENT as REASON_PLACEMENT
from kube_offload.node_filter import REASON_UNKNOWN_NODE as REASON_UNKNOWN_NODE
from kube_offload.node_filter import STRATEGIES as STRATEGIES
from kube_offload.node_filter import STRATEGY_MOST_FREE_REMOTE as STRATEGY_MOST_FREE_REMOTE
from kube_offload.node_filter import STRATEGY_PREFER_LOCAL as STRATEGY_PREFER_LOCAL
from kube_offload.node_filter import STRATEGY_PREFER_REMOTE as STRATEGY_PREFER_REMOTE
from kube_offload.node_filter import evaluate_policy as evaluate_policy
from kube_offload.node_filter import filter_nodes as filter_nodes
from kube_offload.node_filter import is_passthrough as is_passthrough
from kube_offload.node_filter import policy_lookup as policy_lookup
from kube_offload.node_filter import pod_lookup as pod_lookup
from kube_offload.node_filter import prioritize as prioritize
