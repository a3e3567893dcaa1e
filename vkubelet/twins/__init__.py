"""Twin namespaces (loop 1 of ARCHITECTURE.md): for each local namespace offloaded to the
remote cluster, the TwinNamespace request that asks the provider for its twin, and the
rule every loop asks where a namespace's pods and objects go (``namespaces``:
``TwinNamespaces``); ``naming`` - the twin's name. The provider's answers, which the
shared informers follow too, are read in ``vkubelet/shared/twin_requests.py``.
"""
