"""The virtual storage class (docs/storage.md): a local provisioner for claims of one
StorageClass that serves both placements.

* a claim whose first pod the scheduler put on a **virtual node** is provisioned by that
  node's virtual kubelet (:mod:`vkubelet.storage.virtual`): the claim is reflected to the
  remote cluster (reflection/pvcs.py) and a local stand-in PersistentVolume, pinned to
  the virtual node, is bound to the local claim;
* a claim whose first pod went to a **physical node** is provisioned through a real local
  StorageClass (:mod:`vkubelet.storage.physical`, the "physical delegate"): a claim of the
  real class in the storage namespace, and a stand-in volume with the real volume's
  source bound to the user's claim.

Every decision and every object is forged by the pure functions of
:mod:`vkubelet.storage.forge`.
"""
