"""Kubernetes resource quantities and pod resource requests, as exact integers.

Every amount here is an ``int`` of *milli-units* of its resource (``"1.5"`` cpu is 1500,
``"1Gi"`` memory is 1073741824000, one pod is 1000), so sums and comparisons are exact and
cheap, whatever the suffix. Python integers do not overflow, so milli-bytes are fine.

Used by the scheduler extender (does a remote node fit this pod?) and by the virtual
kubelet (remote free resources = allocatable − requests of non-terminated pods; the
virtual node's allocatable = a percentage of that). Pure: no I/O.

Over 400 lines on purpose: it is one representation, the milli-unit integer, and what it
takes to get objects into it and back out. Parsing and formatting a Quantity, the
arithmetic on resource lists and a pod's effective requests (containers, init containers,
sidecars, overhead) all depend on the same scale and the same cap, and every caller needs
the three together; apart, the milli scale would be a fact kept in several modules.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Callable, Iterable, Mapping

ResourceList = dict[str, int]
"""Resource name -> amount in milli-units."""

MILLI = 1000

# The largest magnitude Kubernetes lets a Quantity stand for (2^63 - 1 units); bigger
# values are capped to it, as the Quantity documentation says. Capping also bounds the
# integers a hostile exponent such as "1e999999999" could make us build.
MAX_MILLI = (2**63 - 1) * MILLI

# A real quantity is a handful of characters; refusing absurdly long strings keeps parsing
# linear and far away from Python's int/str conversion limit.
MAX_QUANTITY_LENGTH = 100

_DECIMAL_SUFFIXES: dict[str, int] = {  # power of ten
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: dict[str, int] = {  # power of two
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}

# The Kubernetes grammar: <sign><digits>[.<digits>]<suffix>, where the suffix is a binary
# SI suffix, a decimal SI suffix or an exponent (e3, E-2). "E" alone is exa; "E" followed
# by a number is an exponent, which the alternation order below encodes.
_QUANTITY = re.compile(
    r"""
    (?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))
    (?:
        (?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)
      | [eE](?P<exponent>[+-]?[0-9]+)
      | (?P<decimal>[numkMGTPE]?)
    )
    """,
    re.VERBOSE,
)

# Resources that may be asked for in fractions (milli-units). Every other resource
# (memory, pods, ephemeral-storage, extended resources such as GPUs) is counted in whole
# units, which matters when a percentage of it is taken (see :func:`scale`).
FRACTIONAL_RESOURCES = frozenset({"cpu"})

# Resources whose canonical string is written with binary suffixes (12Gi, not 12884901888).
BINARY_FORMAT_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})
BINARY_FORMAT_PREFIXES = ("hugepages-",)

# Pod-level requests (spec.resources, the PodLevelResources feature) replace the sum of
# the containers' for these resources only, as in Kubernetes' component-helpers.
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
POD_LEVEL_PREFIXES = ("hugepages-",)

# Reasons are easier to read with the usual resources first.
_FIRST_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity, or a request list that is malformed."""


def parse_quantity(value: str | int | float) -> int:
    """A Kubernetes quantity as an exact number of milli-units, rounded up (towards
    positive infinity) to a whole milli-unit as Kubernetes' ``MilliValue()`` does:
    ``"0.1m"`` → 1, ``"1.5"`` → 1500, ``"1Ki"`` → 1024000, ``"1e3"`` → 1000000.

    Integers and floats are accepted because the API accepts JSON numbers for quantities.
    Magnitudes above 2^63−1 units are capped (see :data:`MAX_MILLI`).
    """
    return _parse_scaled(value, 3)


def parse_quantity_nano(value: str | int | float) -> int:
    """A quantity as a whole number of nano-units, rounded up: what CPU usage needs
    (``"249873n"`` → 249873, ``"250m"`` → 250000000), where milli-units would lose it."""
    return _parse_scaled(value, 9)


def _parse_scaled(value: str | int | float, scale: int) -> int:
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a string, got {value!r}")
    if isinstance(value, int):
        return _cap(value * 10**scale)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"quantity must be finite, got {value!r}")
        value = repr(value)
    if not isinstance(value, str):
        raise QuantityError(f"quantity must be a string, got {type(value).__name__}")
    if len(value) > MAX_QUANTITY_LENGTH:
        raise QuantityError(f"quantity is longer than {MAX_QUANTITY_LENGTH} characters")
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 1.5Gi, 1e3)")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # the regex should make this unreachable
        raise QuantityError(f"{value!r} is not a Kubernetes quantity") from exc
    power10 = scale
    power2 = 0
    if match["binary"]:
        power2 = _BINARY_SUFFIXES[match["binary"]]
    elif match["exponent"] is not None:
        power10 += int(match["exponent"])
    else:
        power10 += _DECIMAL_SUFFIXES[match["decimal"]]
    return _exact_milli(number, power10, power2)


def _exact_milli(number: Decimal, power10: int, power2: int) -> int:
    """ceil(number × 10^power10 × 2^power2) with integer arithmetic only, so no Decimal
    context precision can round a long mantissa."""
    sign, digits, exponent = number.as_tuple()
    mantissa = int("".join(map(str, digits))) if digits else 0
    if mantissa == 0:
        return 0
    if sign:
        mantissa = -mantissa
    power10 += int(exponent)
    # Decide huge and tiny magnitudes before building any big integer.
    magnitude = len(digits) + power10 + power2 * 0.30103
    if magnitude > 24:  # > 10^23 milli-units is beyond MAX_MILLI (≈ 9.2 × 10^21)
        return MAX_MILLI if mantissa > 0 else -MAX_MILLI
    if magnitude < -2:  # |value| < 0.01 milli-units
        return 1 if mantissa > 0 else 0
    numerator = mantissa * (2**power2)
    if power10 >= 0:
        return _cap(numerator * 10**power10)
    return _cap(-((-numerator) // 10**-power10))  # ceiling division


def _cap(milli: int) -> int:
    return max(-MAX_MILLI, min(MAX_MILLI, milli))


def format_quantity(milli: int, *, binary: bool = False) -> str:
    """The canonical Kubernetes string for ``milli`` milli-units; exact, so
    ``parse_quantity(format_quantity(x)) == x`` for every int ``x`` within the cap.

    Whole numbers use the largest suffix that keeps an integer mantissa: binary suffixes
    (Ki..Ei) when ``binary`` and the value is a multiple of 1024, else decimal ones (k..E);
    fractions are written in milli-units (``"3500m"``), as Kubernetes canonicalises them.
    """
    if milli < 0:
        return "-" + format_quantity(-milli, binary=binary)
    if milli % MILLI:
        return f"{milli}m"
    units = milli // MILLI
    if units == 0:
        return "0"
    if binary and units % 1024 == 0:
        suffix = ""
        for name in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
            if units % 1024:
                break
            units //= 1024
            suffix = name
        return f"{units}{suffix}"
    suffix = ""
    for name in ("k", "M", "G", "T", "P", "E"):
        if units % 1000:
            break
        units //= 1000
        suffix = name
    return f"{units}{suffix}"


def uses_binary_format(resource: str) -> bool:
    # Quota names (ResourceQuota's requests.memory, limits.memory) format as their resource.
    for prefix in ("requests.", "limits."):
        if resource.startswith(prefix):
            resource = resource[len(prefix):]
            break
    return resource in BINARY_FORMAT_RESOURCES or resource.startswith(BINARY_FORMAT_PREFIXES)


def parse_resource_list(raw: Mapping[str, object] | None) -> ResourceList:
    """A ``ResourceList`` from the API (``{"cpu": "500m", ...}``) in milli-units."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise QuantityError(f"a resource list must be an object, got {type(raw).__name__}")
    parsed: ResourceList = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise QuantityError(f"resource names must be non-empty strings, got {name!r}")
        try:
            parsed[name] = parse_quantity(value)  # type: ignore[arg-type]
        except QuantityError as exc:
            raise QuantityError(f"{name}: {exc}") from None
    return parsed


def format_resource_list(resources: Mapping[str, int]) -> dict[str, str]:
    """The API shape of ``resources``: canonical strings, binary suffixes for bytes."""
    return {
        name: format_quantity(amount, binary=uses_binary_format(name))
        for name, amount in sorted(resources.items(), key=lambda item: resource_sort_key(item[0]))
    }


def resource_sort_key(name: str) -> tuple[int, str]:
    """cpu, memory, pods, ephemeral-storage first, then the rest by name."""
    try:
        return (_FIRST_RESOURCES.index(name), "")
    except ValueError:
        return (len(_FIRST_RESOURCES), name)


# --- arithmetic --------------------------------------------------------------------------
def add(*lists: Mapping[str, int]) -> ResourceList:
    """Sum per resource; a resource missing from a list counts as zero."""
    total: ResourceList = {}
    for resources in lists:
        for name, amount in resources.items():
            total[name] = total.get(name, 0) + amount
    return total


def subtract(minuend: Mapping[str, int], subtrahend: Mapping[str, int]) -> ResourceList:
    """``minuend − subtrahend`` per resource over the resources of both.

    Not clamped: an overcommitted node (requests above allocatable, e.g. after it shrank)
    has negative free resources, and hiding that would make two such nodes look alike.
    Use :func:`clamp_non_negative` where a negative amount cannot be published.
    """
    result = dict(minuend)
    for name, amount in subtrahend.items():
        result[name] = result.get(name, 0) - amount
    return result


def maximum(*lists: Mapping[str, int]) -> ResourceList:
    """Per-resource maximum over the lists that name the resource."""
    result: ResourceList = {}
    for resources in lists:
        for name, amount in resources.items():
            if name not in result or amount > result[name]:
                result[name] = amount
    return result


def clamp_non_negative(resources: Mapping[str, int]) -> ResourceList:
    return {name: max(0, amount) for name, amount in resources.items()}


def scale(resources: Mapping[str, int], percent: int | float | Decimal) -> ResourceList:
    """``percent`` % of each amount, always rounded DOWN, never up: a virtual node must not
    promise what the remote cluster does not have.

    cpu keeps milli-unit precision (90 % of 1 cpu = 900m); every other resource is rounded
    down to a whole unit (90 % of 5 GPUs = 4, of 105 pods = 94, of 1001 bytes = 900),
    because Kubernetes counts them in whole units. Negative amounts scale towards −∞.
    """
    factor = Decimal(str(percent))
    if not factor.is_finite() or factor < 0:
        raise ValueError(f"percent must be a finite number >= 0, got {percent!r}")
    numerator, denominator = factor.as_integer_ratio()
    denominator *= 100
    scaled: ResourceList = {}
    for name, amount in resources.items():
        value = (amount * numerator) // denominator
        if name not in FRACTIONAL_RESOURCES:
            value -= value % MILLI  # floor to a whole unit (Python's % is floor-based)
        scaled[name] = value
    return scaled


def fits(requests: Mapping[str, int], free: Mapping[str, int]) -> tuple[bool, str]:
    """Whether every positive request fits in ``free``; if not, the reason names the first
    resource (cpu, memory, pods, ephemeral-storage, then by name) that does not fit.

    A resource absent from ``free`` has nothing free. Zero requests always fit, as in the
    scheduler's NodeResourcesFit.
    """
    for name in sorted(requests, key=resource_sort_key):
        wanted = requests[name]
        if wanted <= 0:
            continue
        available = free.get(name, 0)
        if wanted > available:
            binary = uses_binary_format(name)
            return False, (
                f"insufficient {name}: requested {format_quantity(wanted, binary=binary)}, "
                f"free {format_quantity(available, binary=binary)}"
            )
    return True, ""


# --- pods -------------------------------------------------------------------------------
def pod_requests(pod: Mapping[str, object]) -> ResourceList:
    """The effective requests of ``pod`` in milli-units, computed as Kubernetes does
    (component-helpers ``PodRequests``) so we agree with the scheduler and the kubelet:

    - the sum of the app containers' requests, plus those of restartable init containers
      (sidecars, ``restartPolicy: Always``), which keep running beside the app; a
      limit without a request counts as that request, as the apiserver defaults it;
    - at least, per resource, the peak of the init phase: each regular init container
      runs alone beside the sidecars started before it, and each sidecar beside the
      sidecars before it;
    - pod-level ``spec.resources.requests`` replace the above for cpu, memory and
      hugepages (PodLevelResources);
    - plus ``spec.overhead`` (RuntimeClass);
    - plus ``pods: 1`` (1000 milli-units), the pod's own slot on a node.

    Raises :class:`QuantityError` on a malformed pod or quantity.
    """
    requests = _pod_total(_pod_spec(pod), _container_requests, _requests_of)
    requests["pods"] = requests.get("pods", 0) + MILLI
    return requests


def pod_limits(pod: Mapping[str, object]) -> ResourceList:
    """The effective limits of ``pod`` in milli-units, as Kubernetes computes them for a
    ResourceQuota's ``limits.*`` (component-helpers ``PodLimits``): app containers and
    sidecars summed, at least the peak of the init phase, pod-level
    ``spec.resources.limits`` replacing cpu, memory and hugepages, plus ``spec.overhead``.

    A container without a limit for a resource adds nothing to it here (the pod is then
    unbounded in that resource: :func:`containers_without_limit` finds them, and a quota
    that counts the limit refuses such a pod, as ResourceQuota does). Raises
    :class:`QuantityError` on a malformed pod or quantity.
    """
    return _pod_total(_pod_spec(pod), _container_limits, _limits_of)


def _pod_spec(pod: Mapping[str, object]) -> Mapping[str, object]:
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise QuantityError("pod spec must be an object")
    return spec


def _container_limits(container: Mapping[str, object]) -> ResourceList:
    return _limits_of(container.get("resources"), f"container {container.get('name')!r}")


def _pod_total(
    spec: Mapping[str, object],
    of_container: Callable[[Mapping[str, object]], ResourceList],
    of_resources: Callable[[object, str], ResourceList],
) -> ResourceList:
    """What :func:`pod_requests` and :func:`pod_limits` both compute, one reading of the
    containers apart (component-helpers aggregates requests and limits alike): app
    containers and sidecars summed, at least the init phase's peak, pod-level
    ``spec.resources`` (read by ``of_resources``) replacing cpu, memory and hugepages, plus
    ``spec.overhead``."""
    total: ResourceList = {}
    for container in _containers(spec, "containers"):
        for name, amount in of_container(container).items():
            total[name] = total.get(name, 0) + amount

    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for container in _containers(spec, "initContainers"):
        own = of_container(container)
        if container.get("restartPolicy") == "Always":
            for name, amount in own.items():
                total[name] = total.get(name, 0) + amount
                sidecars[name] = sidecars.get(name, 0) + amount
            during = sidecars
        else:
            during = add(own, sidecars)
        for name, amount in during.items():
            if name not in init_peak or amount > init_peak[name]:
                init_peak[name] = amount
    for name, amount in init_peak.items():
        if name not in total or amount > total[name]:
            total[name] = amount

    for name, amount in of_resources(spec.get("resources"), "spec.resources").items():
        if name in POD_LEVEL_RESOURCES or name.startswith(POD_LEVEL_PREFIXES):
            total[name] = amount

    overhead = spec.get("overhead")
    if overhead is not None:
        try:
            overhead_list = parse_resource_list(overhead)  # type: ignore[arg-type]
        except QuantityError as exc:
            raise QuantityError(f"spec.overhead: {exc}") from None
        for name, amount in overhead_list.items():
            total[name] = total.get(name, 0) + amount
    return total


def containers_without_limit(pod: Mapping[str, object], resource: str) -> list[str]:
    """The field paths (``spec.containers[0]``...) of the containers of ``pod`` that set
    no limit for ``resource`` (ephemeral containers take no resources and are skipped);
    empty when pod-level ``spec.resources.limits`` bound it for the whole pod."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(spec, Mapping):
        return []
    pod_level = spec.get("resources")
    if isinstance(pod_level, Mapping) and isinstance(pod_level.get("limits"), Mapping) and resource in pod_level["limits"]:
        if resource in POD_LEVEL_RESOURCES or resource.startswith(POD_LEVEL_PREFIXES):
            return []
    missing = []
    for field in ("initContainers", "containers"):
        for index, container in enumerate(_containers(spec, field)):
            res = container.get("resources")
            limits = res.get("limits") if isinstance(res, Mapping) else None
            if not isinstance(limits, Mapping) or resource not in limits:
                missing.append(f"spec.{field}[{index}]")
    return missing


def limits_unequal_to_requests(pod: Mapping[str, object], resource: str) -> list[tuple[str, str, int | None, int | None]]:
    """(field path, container name, request, limit) in milli-units for every container and
    init container of ``pod`` whose ``resource`` limit is missing or differs from its
    request, and for pod-level ``spec.resources`` (name "") when it names ``resource`` with
    the two unequal. A missing request is its limit, as the API server defaults it; a
    missing limit is None. Ephemeral containers take no resources and are skipped.
    Raises :class:`QuantityError` on a malformed pod or quantity."""
    spec = _pod_spec(pod)
    unequal: list[tuple[str, str, int | None, int | None]] = []

    def check(path: str, name: str, resources: object, *, optional: bool) -> None:
        limits = _limits_of(resources, path)
        requests = {**limits, **_requests_of(resources, path)}
        if optional and resource not in limits and resource not in requests:
            return
        limit, request = limits.get(resource), requests.get(resource)
        if limit is None or limit != request:
            unequal.append((path, name, request, limit))

    for field in ("initContainers", "containers"):
        for index, container in enumerate(_containers(spec, field)):
            check(f"spec.{field}[{index}]", str(container.get("name") or ""), container.get("resources"), optional=False)
    if spec.get("resources") is not None:
        check("spec", "", spec.get("resources"), optional=True)
    return unequal


def _limits_of(resources: object, where: str) -> ResourceList:
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise QuantityError(f"{where}: resources must be an object")
    try:
        return parse_resource_list(resources.get("limits"))
    except QuantityError as exc:
        raise QuantityError(f"{where}: limits: {exc}") from None


TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


def pod_is_terminated(pod: Mapping[str, object]) -> bool:
    """A pod in a final phase holds no resources any more (the scheduler agrees)."""
    status = pod.get("status")
    return isinstance(status, Mapping) and status.get("phase") in TERMINATED_PHASES


def node_allocatable(node: Mapping[str, object]) -> ResourceList:
    """``status.allocatable`` of a Node in milli-units (empty when not reported yet)."""
    status = node.get("status")
    if not isinstance(status, Mapping):
        return {}
    return parse_resource_list(status.get("allocatable"))


def free_resources(allocatable: Mapping[str, int], pods: Iterable[Mapping[str, object]]) -> ResourceList:
    """``allocatable`` minus the requests of the non-terminated ``pods`` (the caller passes
    the pods bound to that node). Not clamped: see :func:`subtract`."""
    used: ResourceList = {}
    for pod in pods:
        if pod_is_terminated(pod):
            continue
        for name, amount in pod_requests(pod).items():
            used[name] = used.get(name, 0) + amount
    return subtract(allocatable, used)


def _containers(spec: Mapping[str, object], field: str) -> Iterable[Mapping[str, object]]:
    containers = spec.get(field)
    if containers is None:
        return ()
    if not isinstance(containers, list):
        raise QuantityError(f"spec.{field} must be a list")
    for index, container in enumerate(containers):
        if not isinstance(container, Mapping):
            raise QuantityError(f"spec.{field}[{index}] must be an object")
    return containers


def _container_requests(container: Mapping[str, object]) -> ResourceList:
    return _requests_of(container.get("resources"), f"container {container.get('name')!r}")


def _requests_of(resources: object, where: str) -> ResourceList:
    """Requests of one container (or of the pod level), with the apiserver's defaulting
    applied: a resource with a limit and no request requests its limit
    (``SetDefaults_Pod``). Pods from the API already carry the defaulted requests; a
    ShadowPod's template does not, and counting its limits-only ``nvidia.com/gpu: 1`` as
    nothing would let it slip past a consumer's quota."""
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise QuantityError(f"{where}: resources must be an object")
    try:
        requests = parse_resource_list(resources.get("requests"))
    except QuantityError as exc:
        raise QuantityError(f"{where}: requests: {exc}") from None
    try:
        limits = parse_resource_list(resources.get("limits"))
    except QuantityError as exc:
        raise QuantityError(f"{where}: limits: {exc}") from None
    for name, amount in limits.items():
        requests.setdefault(name, amount)
    return requests
