"""The provider side for each consumer: ``consumer_loops`` (wiring of the two loops below
and the cluster-wide informers they read, with ``trim``: what those caches keep),
``twins`` (the TwinNamespace controller: the namespaces a consumer asks for) with
``twin_plan`` (its pure decisions), ``consumer_status_loop`` (the Consumer status loop)
with ``consumer_status`` (pure), ``quota`` (what a consumer uses: one definition, read
by the status loop and by the ShadowPod webhook) and ``consumer_api`` (their writes).
"""
