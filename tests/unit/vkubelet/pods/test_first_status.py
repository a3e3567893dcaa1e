"""The deadlines of the first status writes held back (vkubelet/pods/first_status.py)."""

from vkubelet.pods.first_status import FirstWriteHolds


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_hold_starts_at_the_first_ask_and_ends_at_its_deadline():
    clock = Clock()
    holds = FirstWriteHolds(5.0, clock)
    assert holds.left("ns/a") == 5.0
    clock.now += 2
    assert holds.left("ns/a") == 3.0  # not restarted by a second ask
    assert holds.left("ns/b") == 5.0  # each pod its own
    clock.now += 3
    assert holds.left("ns/a") == 0.0
    assert holds.left("ns/b") == 2.0


def test_forgotten_pods_leave_nothing_behind():
    holds = FirstWriteHolds(5.0, Clock())
    holds.left("ns/a")
    holds.left("ns/b")
    holds.forget("ns/a")
    holds.forget("ns/never")
    assert len(holds) == 1


def test_zero_seconds_never_holds():
    holds = FirstWriteHolds(0.0, Clock())
    assert holds.left("ns/a") == 0.0
    assert len(holds) == 0
