"""The kube-offload scheduler extender: kube-scheduler's filter/prioritize calls keep a
pod off virtual nodes its namespace policy refuses, that are not Ready, or whose remote
cluster has no node that can fit it (docs/extender.md).

Pure decisions in ``core`` and ``wire``; HTTP in ``app``; caches in ``caches``; process
in ``server``; flags in ``cli``; scheduler registration in ``registration``.
"""
