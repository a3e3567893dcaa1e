"""``kubectl offload``: explain where a pod can run and why, and the state of every peering.

A kubectl plugin (the ``kubectl-offload`` executable, the same CLI as ``kube-offload``) for
the people who run workloads and operate peerings. It decides nothing of its own: the
namespace policy, the webhook's mutation, the extender's filter and the provider's quota
rule are asked through the components' own pure functions, so the answer is the one the
cluster gives. Layout: ``*_facts``/``kubeconfigs`` read the clusters (I/O), ``explain``,
``status`` and ``scheduling`` decide (pure), ``render`` formats, ``cli`` wires flags.
"""
