"""The reasons users read (part of the contract, with :mod:`kube_offload.constants`): of the
Kubernetes Events the components record and of the ``status.reason`` / condition reasons
they write. ``kubectl describe``, alerts, ``kubectl offload`` and the e2e tests match on
these words, so each is written here once; the components import them (under the short
names their modules used, where those differ) and docs/virtual-kubelet.md,
docs/reflection.md, docs/storage.md and docs/enforcer.md list them.
"""

from __future__ import annotations

from typing import Final

# --- vkubelet: Events on local pods and namespaces (docs/virtual-kubelet.md) ----------------
REASON_OFFLOADED: Final = "Offloaded"
REASON_OFFLOADING_FAILED: Final = "OffloadingFailed"
REASON_REMOTE_UNSCHEDULABLE: Final = "RemoteUnschedulable"
# The pod was evicted (handed back) because the remote cluster could not run it: unschedulable
# there past --handback-after, or refused for good (vkubelet/pods/handback_rules.py). Warning.
REASON_HANDED_BACK: Final = "HandedBack"
# It was due for handback but may not be evicted (no controller and its namespace does not
# ask for it; a DaemonSet pod): it waits on the virtual node. Warning.
REASON_NOT_HANDED_BACK: Final = "NotHandedBack"
REASON_TWIN_CONFLICT: Final = "TwinNamespaceConflict"
REASON_TWIN_REFUSED: Final = "TwinNamespaceRefused"
# The provider revoked our read access to a Ready twin (its consumer RoleBinding gone):
# the namespace's pods are left as they are until it returns (vkubelet/pods/forbidden.py).
REASON_TWIN_FORBIDDEN: Final = "TwinNamespaceForbidden"
REASON_POLICY_INVALID: Final = "InvalidOffloadingPolicy"
# The remote cluster stopped answering: the pod is marked not Ready (the word the node
# lifecycle controller uses for the pods of a lost node).
REASON_NODE_NOT_READY: Final = "NodeNotReady"
# A pod deleted while the remote cluster was unreachable, deleted locally after its grace
# period plus the margin without its remote pod seen to stop.
REASON_TERMINATION_UNCONFIRMED: Final = "RemoteTerminationUnconfirmed"
# A remote pod address outside the configured remapping (vkubelet/shared/ip_remapping.py): shown as is.
REASON_POD_IP_NOT_REMAPPED: Final = "PodIPNotRemapped"
# The provider refused a ShadowPod create/update: the Warning Event carries the provider's
# message, and the same word is the waiting pod's status.reason (vkubelet/pods/refusals.py).
REASON_PROVIDER_REFUSED: Final = "ProviderRefused"
# The provider's policy (Consumer spec.policy) made us change a field before sending the
# object (dropped a priority class, a Service type...): one Warning per field.
REASON_POLICY_ADJUSTED: Final = "ProviderPolicyAdjusted"
# The provider's policy refuses the object as it stands and nothing can be dropped to
# fit it (a volume type, an Ingress host...): it is not sent; one Warning per field.
REASON_POLICY_REFUSED: Final = "ProviderPolicyRefused"
# The pod went through the cluster it would be sent to already (a loop of peerings,
# docs/multihop.md): not sent; the Warning names the chain (the waiting pod's status says
# ProviderRefused with the same message, as for every pod not sent).
REASON_OFFLOADING_LOOP: Final = "OffloadingLoop"
# A pod in API server mode "home" offloaded where no relay to the home API server is known
# (docs/home-api.md): it runs with its home token but the provider's address.
REASON_HOME_API_UNAVAILABLE: Final = "HomeAPIUnavailable"
# The kube-offload.io/api-server annotation (pod or namespace) holds an unknown value: the
# pod runs with no API server access (vkubelet/home_api/pod_access.py).
REASON_INVALID_API_SERVER_MODE: Final = "InvalidAPIServerMode"

# --- vkubelet: status.reason of local pods ----------------------------------------------------
# A pod ended (Failed) because its namespace stopped being offloaded to this cluster.
REASON_NOT_OFFLOADED: Final = "NotOffloaded"
# A DaemonSet pod left Pending (or ended) on a virtual node; also its Event's reason.
REASON_DAEMONSET_NOT_OFFLOADED: Final = "DaemonSetNotOffloaded"

# --- vkubelet: the virtual node's Ready condition ----------------------------------------------
REASON_REMOTE_REACHABLE: Final = "RemoteClusterReachable"
# Also the reason of the pods' Ready=False while their node is not Ready (vkubelet/pods/readiness.py).
REASON_REMOTE_UNREACHABLE: Final = "RemoteClusterUnreachable"

# --- vkubelet: Events on the virtual node about its remote credentials (docs/security.md) ------
# The bound token of the remote kubeconfig was renewed (TokenRequest) and written back.
REASON_REMOTE_CREDENTIALS_RENEWED: Final = "RemoteCredentialsRenewed"
# It expired before it could be renewed (the virtual kubelet was down longer than its
# lifetime): `kube-offload peer` issues a new one.
REASON_REMOTE_CREDENTIALS_EXPIRED: Final = "RemoteCredentialsExpired"
# The remote cluster refused it before its expiry: revoked (its ServiceAccount deleted).
REASON_REMOTE_CREDENTIALS_REFUSED: Final = "RemoteCredentialsRefused"

# --- vkubelet: reflection Events on local objects (docs/reflection.md) -------------------------
REASON_REFLECTION_CONFLICT: Final = "ReflectionConflict"
REASON_REFLECTION_FAILED: Final = "ReflectionFailed"

# --- vkubelet: the virtual storage class's Events on claims (docs/storage.md) ------------------
REASON_PROVISIONED_REMOTELY: Final = "ProvisionedRemotely"
REASON_WAITING_FOR_REMOTE_CLAIM: Final = "WaitingForRemoteClaim"
REASON_PROVISIONING_FAILED: Final = "ProvisioningFailed"
REASON_PROVISIONED_LOCALLY: Final = "ProvisionedLocally"

# --- enforcer: Events on ShadowPods (docs/enforcer.md) ------------------------------------------
# Written by enforcers before issue 27 (one per pod, repeating the vkubelet's Offloaded):
# no longer written; the vkubelet still skips it from an older provider's enforcer.
REASON_POD_CREATED: Final = "PodCreated"
REASON_POD_RECREATED: Final = "PodRecreated"
REASON_POD_CREATION_FAILED: Final = "PodCreationFailed"
# The provider's rules, judged again when the enforcer makes a pod (its first or any later
# one), refuse it against the Consumer as it is now (a grant withdrawn, a lowered quota, a
# drain): no pod is made until they admit it (docs/enforcer.md "Every pod is judged").
REASON_POD_REFUSED: Final = "PodRefused"
REASON_EXTRA_POD_DELETED: Final = "ExtraPodDeleted"
# The ShadowPod's local pod is being deleted: its pod is deleted with that grace period.
REASON_POD_TERMINATING: Final = "PodTerminating"
REASON_POD_NAME_TAKEN: Final = "PodNameTaken"
REASON_INVALID_SHADOWPOD: Final = "InvalidShadowPod"
REASON_POD_UPDATED: Final = "PodUpdated"
REASON_POD_UPDATE_REFUSED: Final = "PodUpdateRefused"
# Ephemeral containers (kubectl debug) of the template added to the running pod through
# pods/ephemeralcontainers, or refused (the provider's rules, or its API server's admission).
REASON_EPHEMERAL_CONTAINERS_ADDED: Final = "EphemeralContainersAdded"
REASON_EPHEMERAL_CONTAINERS_REFUSED: Final = "EphemeralContainersRefused"

# --- enforcer and vkubelet: a slice's decision (docs/slices.md "Events") ----------------------
# One Event per change of the provider's answer to an OffloadSlice: on the OffloadSlice by
# the enforcer (provider; `kubectl describe offloadslice`), and on the slice's virtual node
# by its vkubelet (consumer; `kubectl describe node`). Normal when accepted in full, Warning
# otherwise (kube_offload/slice_requests.py decision_event).
REASON_SLICE_ACCEPTED: Final = "SliceAccepted"
REASON_SLICE_PARTIALLY_ACCEPTED: Final = "SlicePartiallyAccepted"
REASON_SLICE_REFUSED: Final = "SliceRefused"
REASON_SLICE_PENDING: Final = "SlicePending"
# In-place resize (kube_offload/pod_resize.py): the enforcer resized the running pod through
# pods/resize, or the provider refused that; the kubelet's own Events then say how it went.
REASON_POD_RESIZED: Final = "PodResized"
REASON_POD_RESIZE_REFUSED: Final = "PodResizeRefused"

# --- enforcer: Events on Consumers (cluster-scoped: in namespace default; docs/enforcer.md) ------
# A drain's grace ended with ShadowPods of the consumer still here: the enforcer deleted them.
REASON_DRAIN_GRACE_EXPIRED: Final = "DrainGraceExpired"
# No ShadowPod of a drained consumer is left.
REASON_DRAINED: Final = "Drained"
# Service continuity (docs/reflection.md): the consumer's heartbeat Lease went silent past
# the grace, so the endpoints it reflected here are held not ready; and its return.
REASON_CONSUMER_UNREACHABLE: Final = "ConsumerUnreachable"
REASON_CONSUMER_REACHABLE: Final = "ConsumerReachable"
