"""The webhook's pod mutation: pure, so it lives in the domain
(:mod:`kube_offload.pod_mutation`), where ``kubectl offload explain`` reads it too; this
module keeps the webhook's import path.
"""

from __future__ import annotations

from kube_offload.pod_mutation import DEFAULT_SCHEDULER as DEFAULT_SCHEDULER
from kube_offload.pod_mutation import MIRROR_POD_ANNOTATION as MIRROR_POD_ANNOTATION
from kube_offload.pod_mutation import MalformedPod as MalformedPod
from kube_offload.pod_mutation import mutate_pod as mutate_pod
from kube_offload.pod_mutation import skip_reason as skip_reason
