"""What the test tiers share, importable from any of them (``pythonpath = ["tests"]`` in
pyproject.toml's pytest settings; docs/testing.md#the-support-package).

- :mod:`support.waiting`: ``wait_for``, the one poller of the e2e and real-node tiers.
- :mod:`support.informers`: real informers that never list, fed watch events through
  their public ``apply`` and list answers through ``replace``, and ``drain``, the keys a
  controller's workers would take.
- :mod:`support.recording_kube`: ``RecordingKube``, the API layer for writes: it records
  each create/patch/delete/apply and answers as an API server would (AlreadyExists,
  NotFound, Conflict, an error on demand), for unit tests of a loop's reconcile.
- :mod:`support.builders`: the Kubernetes objects unit tests build again and again.
- :mod:`support.clusters`: what the e2e and real-node modules do to real clusters
  (offloaded namespaces, a Deployment, reads of the provider's objects, the logs of a
  failed session) and a bare control plane of a module's own; it imports the harness,
  so only the cluster tiers import it.
- :mod:`support.metrics`: a harness-run component's health port and what its
  ``/metrics`` says (for the e2e modules that check a figure moved).

The informers are the product's own, fed the events a watch would deliver, and the e2e
helpers drive real clusters; the one fake, of the API layer's writes, is for unit tests of
a reconcile only (docs/testing.md, "The support package").
"""
