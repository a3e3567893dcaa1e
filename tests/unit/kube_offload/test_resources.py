"""Quantities and pod requests, checked against what Kubernetes computes."""

from __future__ import annotations

import re

import pytest

from kube_offload import resources as r
from kube_offload.resources import QuantityError, parse_quantity as q

GI = 1024**3


# --- parsing -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, milli",
    [
        ("0", 0),
        ("1", 1000),
        ("500m", 500),
        ("1.5", 1500),
        ("0.1", 100),
        (".5", 500),
        ("5.", 5000),
        ("+2", 2000),
        ("-1", -1000),
        ("-500m", -500),
        # every decimal SI suffix
        ("1000n", 1),
        ("1000000000n", 1000),
        ("1000u", 1),
        ("1m", 1),
        ("1k", 1000 * 10**3),
        ("1M", 1000 * 10**6),
        ("1G", 1000 * 10**9),
        ("1T", 1000 * 10**12),
        ("1P", 1000 * 10**15),
        ("1E", 1000 * 10**18),
        # every binary SI suffix
        ("1Ki", 1000 * 2**10),
        ("1Mi", 1000 * 2**20),
        ("1Gi", 1000 * 2**30),
        ("1Ti", 1000 * 2**40),
        ("1Pi", 1000 * 2**50),
        ("2Ei", 1000 * 2**61),
        ("1.5Gi", 1500 * GI),
        ("0.5Ki", 512000),
        # decimal exponents (e and E followed by a number)
        ("1e3", 1000 * 1000),
        ("1E3", 1000 * 1000),
        ("1e+3", 1000 * 1000),
        ("1e-3", 1),
        ("2.5e2", 250_000),
        ("12e-1", 1200),
    ],
)
def test_parse_quantity(text: str, milli: int) -> None:
    assert q(text) == milli


@pytest.mark.parametrize(
    "text, milli",
    [
        # below a milli-unit rounds UP, as Kubernetes' MilliValue() does
        ("0.1m", 1),
        ("1n", 1),
        ("1u", 1),
        ("1.0001m", 2),
        ("1500001n", 2),  # 1.500001m
        ("1500000001n", 1501),
        ("1e-9", 1),
        ("0.0001", 1),
        # negative fractions round towards +inf
        ("-0.1m", 0),
        ("-1.5m", -1),
    ],
)
def test_parse_quantity_rounds_up(text: str, milli: int) -> None:
    assert q(text) == milli


def test_parse_quantity_is_exact_for_long_mantissas() -> None:
    # 30 significant digits: a default Decimal context (28 digits) would round this.
    assert q("1234567890.12345678901234567891") == 1234567890124
    assert q("123456789012345678.9") == 123456789012345678900


def test_huge_values_are_capped_not_built() -> None:
    assert q("1e999999999") == r.MAX_MILLI
    assert q("-1e999999999") == -r.MAX_MILLI
    assert q("9Ei") == r.MAX_MILLI
    assert q("1e-999999999") == 1


def test_numbers_are_quantities_too() -> None:
    assert q(2) == 2000
    assert q(0.5) == 500


@pytest.mark.parametrize(
    "bad",
    ["", " 1", "1 ", "1K", "1ki", "1mi", "1e", "1e3.5", "1Gii", "Gi", "abc", "1..0", "--1", "1e3Gi",
     "m", ".", "1,5", "0x10", "1_000", "∞", "1" * 200, "1Mm"],
)
def test_parse_quantity_rejects(bad: str) -> None:
    with pytest.raises(QuantityError):
        q(bad)


@pytest.mark.parametrize("bad", [None, True, [], {}, float("nan"), float("inf")])
def test_parse_quantity_rejects_other_types(bad: object) -> None:
    with pytest.raises(QuantityError):
        q(bad)  # type: ignore[arg-type]


# --- formatting --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "milli, binary, text",
    [
        (0, False, "0"),
        (3500, False, "3500m"),
        (4000, False, "4"),
        (1, False, "1m"),
        (105_000, False, "105"),
        (12 * GI * 1000, True, "12Gi"),
        (1536 * 2**20 * 1000, True, "1536Mi"),
        (1000 * 1000, True, "1k"),  # 1000 is not a multiple of 1024: decimal suffix
        (512_000, True, "512"),
        (1000 * 10**9, False, "1G"),
        (1000 * 2**10, False, "1024"),
        (-1500, False, "-1500m"),
        (-2 * GI * 1000, True, "-2Gi"),
        (1000 * 2**60, True, "1Ei"),
        (1000 * 10**18, False, "1E"),
    ],
)
def test_format_quantity(milli: int, binary: bool, text: str) -> None:
    assert r.format_quantity(milli, binary=binary) == text


@pytest.mark.parametrize(
    "milli", [0, 1, 999, 1000, 1001, 1024000, 3500, 10**15 + 7, 2**40 * 1000, 123456789, -42, r.MAX_MILLI]
)
@pytest.mark.parametrize("binary", [False, True])
def test_format_parse_round_trip(milli: int, binary: bool) -> None:
    assert q(r.format_quantity(milli, binary=binary)) == milli


def test_format_resource_list_uses_binary_suffixes_for_bytes() -> None:
    formatted = r.format_resource_list(
        {"nvidia.com/gpu": 2000, "memory": 12 * GI * 1000, "cpu": 3500, "pods": 105_000, "hugepages-2Mi": 4 * 2**20 * 1000}
    )
    assert formatted == {"cpu": "3500m", "memory": "12Gi", "pods": "105", "hugepages-2Mi": "4Mi", "nvidia.com/gpu": "2"}
    assert list(formatted)[:3] == ["cpu", "memory", "pods"]


# --- arithmetic --------------------------------------------------------------------------
def test_add_subtract_maximum() -> None:
    a = {"cpu": 1000, "memory": 5}
    b = {"cpu": 250, "pods": 1000}
    assert r.add(a, b) == {"cpu": 1250, "memory": 5, "pods": 1000}
    assert r.subtract(a, b) == {"cpu": 750, "memory": 5, "pods": -1000}
    assert r.maximum(a, b) == {"cpu": 1000, "memory": 5, "pods": 1000}
    assert r.clamp_non_negative(r.subtract(a, b)) == {"cpu": 750, "memory": 5, "pods": 0}
    assert a == {"cpu": 1000, "memory": 5}, "inputs are not modified"


@pytest.mark.parametrize(
    "resources, percent, expected",
    [
        ({"cpu": 1000}, 90, {"cpu": 900}),
        ({"cpu": 1001}, 90, {"cpu": 900}),  # 900.9m -> 900m: down, to the milli
        ({"cpu": 3333}, 33.3, {"cpu": 1109}),  # 1109.889m
        ({"pods": 105_000}, 90, {"pods": 94_000}),  # 94.5 pods -> 94: whole units
        ({"nvidia.com/gpu": 5000}, 90, {"nvidia.com/gpu": 4000}),
        ({"memory": 1001_000}, 90, {"memory": 900_000}),  # 900.9 bytes -> 900
        ({"memory": 12 * GI * 1000}, 50, {"memory": 6 * GI * 1000}),
        ({"cpu": 1000, "pods": 1000}, 100, {"cpu": 1000, "pods": 1000}),
        ({"cpu": 1000}, 0, {"cpu": 0}),
        ({"pods": -1500}, 100, {"pods": -2000}),  # negative: towards -inf
    ],
)
def test_scale_rounds_down(resources: dict, percent: float, expected: dict) -> None:
    assert r.scale(resources, percent) == expected


@pytest.mark.parametrize("percent", [-1, float("nan"), float("inf")])
def test_scale_refuses_bad_percent(percent: float) -> None:
    with pytest.raises(ValueError):
        r.scale({"cpu": 1000}, percent)


def test_fits_names_the_first_resource_short() -> None:
    free = {"cpu": 2000, "memory": GI * 1000, "pods": 10_000}
    assert r.fits({"cpu": 2000, "memory": GI * 1000, "pods": 1000}, free) == (True, "")
    ok, why = r.fits({"pods": 1000, "memory": 2 * GI * 1000, "cpu": 3000}, free)
    assert not ok
    assert why == "insufficient cpu: requested 3, free 2"
    ok, why = r.fits({"cpu": 1000, "memory": 2 * GI * 1000}, free)
    assert (ok, why) == (False, "insufficient memory: requested 2Gi, free 1Gi")


def test_fits_absent_resource_has_nothing_free_but_zero_requests_fit() -> None:
    assert r.fits({"nvidia.com/gpu": 1000}, {"cpu": 1000}) == (
        False,
        "insufficient nvidia.com/gpu: requested 1, free 0",
    )
    assert r.fits({"nvidia.com/gpu": 0, "cpu": 0}, {}) == (True, "")


# --- pod requests ------------------------------------------------------------------------
def container(name: str, restart_policy: str | None = None, **requests: str) -> dict:
    spec: dict = {"name": name, "image": "busybox"}
    if requests:
        spec["resources"] = {"requests": {k.replace("_", "-"): v for k, v in requests.items()}}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return spec


def pod(containers: list, init: list | None = None, overhead: dict | None = None, pod_level: dict | None = None) -> dict:
    spec: dict = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    if pod_level is not None:
        spec["resources"] = {"requests": pod_level}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "demo"}, "spec": spec}


def test_pod_requests_sum_containers_and_count_the_pod() -> None:
    p = pod([container("a", cpu="100m", memory="64Mi"), container("b", cpu="1", memory="1Gi")])
    assert r.pod_requests(p) == {"cpu": 1100, "memory": (64 * 2**20 + GI) * 1000, "pods": 1000}


def test_pod_without_requests_only_counts_as_a_pod() -> None:
    assert r.pod_requests(pod([container("a"), {"name": "b", "resources": {}}])) == {"pods": 1000}
    assert r.pod_requests({"metadata": {}}) == {"pods": 1000}


def test_init_containers_take_the_max_not_the_sum() -> None:
    p = pod(
        [container("app", cpu="500m", memory="1Gi")],
        init=[container("init1", cpu="2", memory="100Mi"), container("init2", cpu="1", memory="2Gi")],
    )
    assert r.pod_requests(p) == {"cpu": 2000, "memory": 2 * GI * 1000, "pods": 1000}


def test_init_container_resource_the_app_does_not_ask_for() -> None:
    p = pod([container("app", cpu="1")], init=[container("init", **{"ephemeral_storage": "1Gi"})])
    assert r.pod_requests(p) == {"cpu": 1000, "ephemeral-storage": GI * 1000, "pods": 1000}


def test_sidecars_add_to_the_app_and_to_later_init_containers() -> None:
    # KEP-753: sidecar (restartPolicy Always) keeps running; a regular init container
    # after it runs beside it.
    p = pod(
        [container("app", cpu="1")],
        init=[
            container("sidecar", "Always", cpu="500m"),
            container("migrate", cpu="3"),
        ],
    )
    # app phase: 1 + 0.5 = 1.5; init peak: migrate 3 + sidecar 0.5 = 3.5
    assert r.pod_requests(p)["cpu"] == 3500


def test_init_container_before_a_sidecar_does_not_run_beside_it() -> None:
    p = pod(
        [container("app", cpu="1")],
        init=[container("setup", cpu="2"), container("sidecar", "Always", cpu="500m")],
    )
    # init peak: max(setup 2, sidecar 0.5) = 2; app phase 1.5
    assert r.pod_requests(p)["cpu"] == 2000


def test_several_sidecars_accumulate() -> None:
    p = pod(
        [container("app", cpu="1", memory="1Gi")],
        init=[
            container("s1", "Always", cpu="1", memory="1Gi"),
            container("s2", "Always", cpu="1"),
            container("job", cpu="1", memory="3Gi"),
        ],
    )
    # app phase: cpu 3, memory 2Gi; init peak: job + s1 + s2 = cpu 3, memory 4Gi
    assert r.pod_requests(p) == {"cpu": 3000, "memory": 4 * GI * 1000, "pods": 1000}


def test_init_container_restart_policy_other_than_always_is_regular() -> None:
    p = pod([container("app", cpu="1")], init=[container("i", "OnFailure", cpu="500m")])
    assert r.pod_requests(p)["cpu"] == 1000


def test_overhead_is_added_after_the_max() -> None:
    p = pod(
        [container("app", cpu="1")],
        init=[container("init", cpu="2")],
        overhead={"cpu": "250m", "memory": "120Mi"},
    )
    assert r.pod_requests(p) == {"cpu": 2250, "memory": 120 * 2**20 * 1000, "pods": 1000}


def test_pod_level_requests_replace_cpu_and_memory_only() -> None:
    p = pod(
        [container("app", cpu="1", memory="1Gi", **{"ephemeral_storage": "1Gi"})],
        overhead={"cpu": "100m"},
        pod_level={"cpu": "3", "memory": "2Gi", "ephemeral-storage": "5Gi"},
    )
    assert r.pod_requests(p) == {"cpu": 3100, "memory": 2 * GI * 1000, "ephemeral-storage": GI * 1000, "pods": 1000}


def test_a_limit_without_a_request_counts_as_the_request() -> None:
    # As the apiserver defaults a Pod: a ShadowPod template is not defaulted, and its
    # limits-only GPU must count against a quota all the same.
    app = {"name": "app", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}, "requests": {"cpu": "500m"}}}
    init = {"name": "init", "resources": {"limits": {"memory": "1Gi"}}}
    p = pod([app], init=[init])
    assert r.pod_requests(p) == {"cpu": 500, "nvidia.com/gpu": 1000, "memory": GI * 1000, "pods": 1000}
    p["spec"]["resources"] = {"limits": {"cpu": "4"}}  # pod level, PodLevelResources
    assert r.pod_requests(p)["cpu"] == 4000


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"containers": "x"}, "spec.containers must be a list"),
        ({"containers": ["x"]}, "spec.containers[0] must be an object"),
        ({"containers": [{"name": "a", "resources": []}]}, "resources must be an object"),
        ({"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}, "cpu"),
        ({"containers": [{"name": "a", "resources": {"requests": ["cpu"]}}]}, "must be an object"),
        ({"containers": [], "initContainers": {}}, "spec.initContainers must be a list"),
        ({"containers": [], "overhead": {"cpu": "1x"}}, "spec.overhead"),
        ({"containers": [{"name": "a", "resources": {"limits": {"cpu": "x"}}}]}, "limits: cpu"),
        ([], "pod spec must be an object"),
    ],
)
def test_pod_requests_rejects_malformed_pods(spec: object, message: str) -> None:
    with pytest.raises(QuantityError, match=re.escape(message)):
        r.pod_requests({"metadata": {}, "spec": spec})


def test_free_resources_ignores_terminated_pods() -> None:
    allocatable = r.node_allocatable(
        {"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}
    )
    running = pod([container("a", cpu="1500m", memory="1Gi")])
    running["status"] = {"phase": "Running"}
    pending = pod([container("a", cpu="500m")])
    done = pod([container("a", cpu="2")])
    done["status"] = {"phase": "Succeeded"}
    failed = pod([container("a", cpu="2")])
    failed["status"] = {"phase": "Failed"}
    free = r.free_resources(allocatable, [running, pending, done, failed])
    assert free == {"cpu": 2000, "memory": 7 * GI * 1000, "pods": 108_000}
    assert r.format_resource_list(r.scale(free, 90)) == {"cpu": "1800m", "memory": "6764573491", "pods": "97"}


def test_node_allocatable_without_status_is_empty() -> None:
    assert r.node_allocatable({"metadata": {"name": "n"}}) == {}
