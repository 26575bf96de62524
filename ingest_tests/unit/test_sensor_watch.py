"""A sensor tick watches an idle source (a batch run going, nothing new) and acts as soon as it moves."""

from dagster import SensorResult, SkipReason

from ingest.defs.sensors import Idle, watch


class Clock:
    def __init__(self, cost: float = 0.0):
        self.now, self.cost, self.slept = 0.0, cost, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_an_idle_tick_looks_again_when_the_source_moved_and_acts_at_once():
    clock = Clock()
    heads = iter([False, False, True])  # the head moves at the third probe
    looks = []

    def evaluate():
        looks.append(clock.now)
        if len(looks) == 1:
            return Idle("binlog head at X: nothing new", lambda: next(heads))
        return SensorResult(run_requests=[])

    result = watch(evaluate, 4.0, clock=clock, sleep=clock.sleep)
    assert isinstance(result, SensorResult)
    assert looks == [0.0, 0.75]  # a full look only after the probe saw the move, within a poll of it
    assert clock.slept == [0.25, 0.25, 0.25]


def test_a_tick_that_stays_idle_skips_with_its_reason_before_the_daemons_next_loop():
    clock = Clock()
    probes = []
    result = watch(lambda: Idle("a batch run is still going", lambda: probes.append(clock.now) or False), 4.0,
                   clock=clock, sleep=clock.sleep)
    assert result == SkipReason("a batch run is still going")
    assert clock.now <= 4.0 and len(probes) == 16


def test_a_costly_look_is_repeated_less_often_and_a_skip_that_is_not_idle_returns_at_once():
    clock = Clock()

    def evaluate():
        clock.now += 0.5  # a look that takes half a second (many tables)
        return Idle("nothing new", lambda: True)

    assert watch(evaluate, 4.0, clock=clock, sleep=clock.sleep) == SkipReason("nothing new")
    assert set(clock.slept) == {1.0}  # twice the look's cost between looks
    assert clock.now <= 4.0

    clock = Clock()
    waiting = SkipReason("waiting for the snapshots of t")
    assert watch(lambda: waiting, 4.0, clock=clock, sleep=clock.sleep) is waiting and clock.slept == []
    # watch_seconds 0: one look per tick
    assert watch(lambda: Idle("nothing new", lambda: True), 0, clock=clock, sleep=clock.sleep) == \
        SkipReason("nothing new")
