"""The offloaded pods' usage: remote PodMetrics read into samples, and the averages
integrated into the monotonic CPU counters a kubelet serves (vkubelet/kubeletapi/usage.py)."""

import pytest

from vkubelet.kubeletapi.usage import (
    ContainerSample,
    PodRef,
    PodSample,
    RunningPod,
    SampleError,
    UsageLedger,
    parse_window,
    parse_timestamp,
    pod_sample,
)

WEB = PodRef("demo", "web", "uid-web")
DB = PodRef("demo", "db", "uid-db")
T0 = 1_800_000_000.0


def sample(pod=WEB, at=T0, window=15.0, cpu=250_000_000, memory=64 << 20, name="app"):
    return PodSample(pod, at, window, (ContainerSample(name, cpu, memory),))


# --- reading PodMetrics -----------------------------------------------------------------------
@pytest.mark.parametrize("text, seconds", [
    ("15s", 15.0), ("15.003s", 15.003), ("1m0.5s", 60.5), ("500ms", 0.5), ("1h2m3s", 3723.0), ("0s", 0.0),
])
def test_durations_as_metav1_duration_writes_them(text, seconds):
    assert parse_window(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "fifteen", "15s garbage", "-3s"])
def test_bad_durations_name_the_window(text):
    with pytest.raises(SampleError, match="window"):
        parse_window(text)


def test_timestamps_with_and_without_fractions():
    assert parse_timestamp("2027-01-15T08:00:00Z") == 1_800_000_000.0
    assert parse_timestamp("2027-01-15T08:00:00.25Z") == 1_800_000_000.25
    with pytest.raises(SampleError, match="timestamp"):
        parse_timestamp("yesterday")


def test_pod_metrics_item_becomes_a_sample_of_the_local_pod():
    item = {
        "metadata": {"name": "web-7d9f-remote", "namespace": "demo-local"},
        "timestamp": "2027-01-15T08:00:00Z",
        "window": "15.003s",
        "containers": [
            {"name": "sidecar", "usage": {"cpu": "249873n", "memory": "65536Ki"}},
            {"name": "app", "usage": {"cpu": "1", "memory": "1Gi"}},
        ],
    }
    got = pod_sample(item, WEB)
    assert got.pod == WEB  # the remote name is never carried further
    assert (got.timestamp, got.window) == (T0, pytest.approx(15.003))
    assert got.containers == (
        ContainerSample("app", 1_000_000_000, 1 << 30),
        ContainerSample("sidecar", 249_873, 64 << 20),
    )


@pytest.mark.parametrize("change, field", [
    ({"timestamp": "soon"}, "timestamp"),
    ({"window": "long"}, "window"),
    ({"containers": [{"name": "app", "usage": {"cpu": "lots"}}]}, "lots"),
    ({"containers": [{"usage": {"cpu": "1"}}]}, "name"),
])
def test_malformed_items_say_which_pod_and_field(change, field):
    item = {"metadata": {"name": "web", "namespace": "demo-local"}, "timestamp": "2027-01-15T08:00:00Z",
            "window": "15s", "containers": [{"name": "app", "usage": {"cpu": "1", "memory": "1Mi"}}], **change}
    with pytest.raises(SampleError, match=f"PodMetrics demo-local/web: .*{field}"):
        pod_sample(item, WEB)


# --- integration ----------------------------------------------------------------------------
def test_first_sample_opens_the_counter_one_window_back_with_rate_times_window():
    ledger = UsageLedger(started=T0 - 100)
    ledger.record([sample()], on_node=[WEB.uid], now=T0)
    [pod] = ledger.snapshot(T0).pods
    [container] = pod.containers
    assert container.start == T0 - 15
    assert container.core_nanoseconds == 250_000_000 * 15
    assert (container.cpu_nanocores, container.memory_bytes, container.timestamp) == (250_000_000, 64 << 20, T0)


def test_an_idle_container_counts_from_one_nanosecond_so_metrics_server_keeps_it():
    """metrics-server drops a pod any of whose containers' counters reads 0; an idle
    container (a real `sleep` on a real node) has a remote rate of 0."""
    ledger = UsageLedger(started=T0)
    ledger.record([sample(cpu=0)], on_node=[WEB.uid], now=T0)
    ledger.record([sample(at=T0 + 10, cpu=0)], on_node=[WEB.uid], now=T0 + 10)
    snap = ledger.snapshot(T0 + 10)
    [container] = snap.pods[0].containers
    assert container.core_nanoseconds == 1 and container.cpu_nanocores == 0
    assert snap.node.core_nanoseconds == 1
    # and the rate between two readings is still the remote one
    ledger.record([sample(at=T0 + 20, cpu=100_000_000)], on_node=[WEB.uid], now=T0 + 20)
    assert ledger.snapshot(T0 + 20).pods[0].containers[0].core_nanoseconds - 1 == 100_000_000 * 10


def test_newer_samples_add_rate_times_elapsed_and_repeats_change_nothing():
    ledger = UsageLedger(started=T0)
    ledger.record([sample()], on_node=[WEB.uid], now=T0)
    ledger.record([sample(at=T0 + 10, cpu=500_000_000)], on_node=[WEB.uid], now=T0 + 10)
    ledger.record([sample(at=T0 + 10, cpu=900_000_000)], on_node=[WEB.uid], now=T0 + 12)  # not newer
    [container] = ledger.snapshot(T0 + 12).pods[0].containers
    assert container.core_nanoseconds == 250_000_000 * 15 + 500_000_000 * 10
    assert container.cpu_nanocores == 500_000_000
    # What metrics-server computes between the two readings is the remote figure.
    assert (container.core_nanoseconds - 250_000_000 * 15) / 10 == 500_000_000


def test_a_gap_is_filled_with_the_newest_average():
    ledger = UsageLedger(started=T0)
    ledger.record([sample()], on_node=[WEB.uid], now=T0)
    ledger.record([sample(at=T0 + 60, cpu=100_000_000)], on_node=[WEB.uid], now=T0 + 60)
    [container] = ledger.snapshot(T0 + 60).pods[0].containers
    assert container.core_nanoseconds == 250_000_000 * 15 + 100_000_000 * 60


def test_a_replaced_remote_pod_keeps_counting_for_the_same_local_pod():
    ledger = UsageLedger(started=T0)
    ledger.record([sample()], on_node=[WEB.uid], now=T0)
    before = ledger.snapshot(T0).pods[0].containers[0].core_nanoseconds
    # The enforcer recreated the remote pod: a fresh remote window, later timestamp.
    ledger.record([sample(at=T0 + 20, window=5.0)], on_node=[WEB.uid], now=T0 + 20)
    after = ledger.snapshot(T0 + 20).pods[0].containers[0]
    assert after.core_nanoseconds == before + 250_000_000 * 20
    assert after.start == T0 - 15


def test_node_is_the_sum_of_current_pods_and_never_goes_back():
    ledger = UsageLedger(started=T0 - 300)
    ledger.record([sample(), sample(DB, cpu=1_000_000_000, memory=1 << 30)], on_node=[WEB.uid, DB.uid], now=T0)
    node = ledger.snapshot(T0).node
    assert (node.start, node.timestamp) == (T0 - 300, T0)
    assert node.cpu_nanocores == 1_250_000_000
    assert node.memory_bytes == (64 << 20) + (1 << 30)
    total = node.core_nanoseconds
    assert total == (250_000_000 + 1_000_000_000) * 15
    # db leaves the node: its CPU time stays in the node's counter, its usage does not.
    ledger.record([sample(at=T0 + 15)], on_node=[WEB.uid], now=T0 + 15)
    node = ledger.snapshot(T0 + 15).node
    assert node.core_nanoseconds == total + 250_000_000 * 15
    assert (node.cpu_nanocores, node.memory_bytes) == (250_000_000, 64 << 20)
    assert [p.pod for p in ledger.snapshot(T0 + 15).pods] == [WEB]


def test_stale_pods_are_not_reported_but_their_time_stays_in_the_node():
    ledger = UsageLedger(started=T0, stale_after=30)
    ledger.record([sample(), sample(DB)], on_node=[WEB.uid, DB.uid], now=T0)
    ledger.record([sample(at=T0 + 40)], on_node=[WEB.uid, DB.uid], now=T0 + 40)  # db's metrics stopped
    snap = ledger.snapshot(T0 + 40)
    assert [p.pod for p in snap.pods] == [WEB]
    assert snap.node.core_nanoseconds == 250_000_000 * (15 + 15 + 40)
    assert snap.node.cpu_nanocores == 250_000_000


def test_an_idle_node_has_no_timestamp():
    ledger = UsageLedger(started=T0)
    ledger.record([], on_node=[], now=T0, scrape_error=True)
    snap = ledger.snapshot(T0)
    assert snap.pods == ()
    assert (snap.node.timestamp, snap.node.core_nanoseconds, snap.node.memory_bytes) == (None, 0, 0)
    assert snap.scrape_error


def test_pod_figures_sum_their_containers():
    two = PodSample(WEB, T0, 10.0, (ContainerSample("a", 100, 10), ContainerSample("b", 300, 30)))
    ledger = UsageLedger(started=T0)
    ledger.record([two], on_node=[WEB.uid], now=T0)
    [pod] = ledger.snapshot(T0).pods
    assert (pod.cpu_nanocores, pod.memory_bytes, pod.core_nanoseconds) == (400, 40, 4000)
    assert [c.name for c in pod.containers] == ["a", "b"]


# --- running pods without a sample (/stats/summary at once) -------------------------------------
def test_a_running_pod_without_a_sample_is_listed_with_zeros_and_not_in_the_node():
    ledger = UsageLedger(started=T0)
    ledger.record([sample()], on_node=[WEB.uid, DB.uid], now=T0)
    running = [RunningPod(WEB, (("app", T0 - 15),)), RunningPod(DB, (("main", T0 - 5), ("side", T0 - 3)))]
    snap = ledger.snapshot(T0 + 1, running)
    assert [p.pod for p in snap.pods] == [DB, WEB]
    db = snap.pods[0]
    assert [(c.name, c.start, c.timestamp, c.cpu_nanocores, c.core_nanoseconds, c.memory_bytes) for c in db.containers] == [
        ("main", T0 - 5, T0 + 1, 0, 0, 0), ("side", T0 - 3, T0 + 1, 0, 0, 0),
    ]
    # The node's figures are the sampled pods' only: a pod without a sample claims nothing.
    assert (snap.node.timestamp, snap.node.memory_bytes) == (T0, 64 << 20)
    assert ledger.snapshot(T0 + 1).pods == snap.pods[1:]  # without `running`: as before


def test_a_pod_whose_samples_went_stale_is_not_reset_to_zero():
    ledger = UsageLedger(started=T0, stale_after=30)
    ledger.record([sample()], on_node=[WEB.uid], now=T0)
    assert ledger.snapshot(T0 + 40, [RunningPod(WEB, (("app", T0),))]).pods == ()
