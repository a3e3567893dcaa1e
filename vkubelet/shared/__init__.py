"""What the virtual kubelet's loops share: the bottom of vkubelet, importing no loop
(the import contract ``vkubelet-packages`` in pyproject.toml).

* ``informers`` - the one informer of each kind per process, asked for by every loop;
  ``trim`` - what each cache keeps of an object; ``indexes`` - remote objects by the
  local object they stand for; ``twin_requests`` - our TwinNamespace requests as the
  provider answers them (which twins are usable: the twin-scoped caches follow them);
* ``origin`` - the origin marks on every remote object of ours (written by the pod
  translation, read by every loop); ``names`` - the names, labels and annotations
  reflection gives remote objects (the pod translation points pods at them);
  ``remote_events`` - which remote Events are worth a local copy; ``claims`` - what a
  PersistentVolumeClaim says of its class and its node;
* ``provider_terms`` - what the provider grants us (its Consumer: admitted, quota,
  cordoned, policy); ``policy_fit`` - what its policy takes out of what we send (pods and
  reflected objects); ``policy_events`` - each of those notes told once per object;
* ``provider_bounds`` - what we take back from the provider, and how much: the sizes and
  counts of a remote pod's status and of remote Events, the pod IPs shown;
* ``events`` - the Event recorder; ``ip_remapping`` - pod IPs between overlapping CIDRs;
  ``settings_error`` - the error of a setting that cannot work;
* ``loops`` - what a loop factory is handed (``LoopContext``) and gives back.
"""
