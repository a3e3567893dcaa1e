"""``kube-offload peer`` / ``kube-offload unpeer``: read both clusters, plan, print, act.

The decisions are in :mod:`kube_offload.peering` (pure, table-tested); this package is the
I/O around them: Helm (``helm`` on PATH or ``--helm``) for the two releases, the
Kubernetes API for everything else, both with the admin kubeconfigs the user passes.
``--dry-run`` prints the plan and stops before the first change.

One module per concern: :mod:`.cli` (the flags), :mod:`.inputs` (flag values and the
local files they name, checked before any cluster is read), :mod:`.helm` (the releases),
:mod:`.api` (one cluster through the Kubernetes API), :mod:`.session` (what both commands
share: the resolved context, waiting, running a plan, exit codes), :mod:`.eviction` (a
going node's pods evicted: ``unpeer``, and ``peer`` removing a slice), :mod:`.slice_removal`
(what removed slices left, and taking it down), :mod:`.connect`
(``peer``) and :mod:`.disconnect` (``unpeer``).
"""
