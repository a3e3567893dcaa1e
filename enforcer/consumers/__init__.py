"""The provider side for each consumer: ``consumer_loops`` (wiring of the two loops below
and the cluster-wide informers they read, with ``trim``: what those caches keep);
``twins`` (the TwinNamespace controller: the namespaces a consumer asks for) with
``twin_plan`` (its pure decisions, over ``twin_names``: which names and how many, and
``twin_objects``: what is made for a twin); ``consumer_status_loop`` (the Consumer status
loop) with ``consumer_status`` (pure); ``quota`` (what a consumer uses: one definition,
read by the status loop and by the ShadowPod webhook); ``consumer_api`` (their writes).
"""
