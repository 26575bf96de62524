"""What a sensor does with an incomplete batch: run it, wait out the backoff, or stop loudly."""

from ingest.batches import Action, FailedRun, backoff_seconds, decide_retry

CMD = "ingest backfill shop --partitions K --wait"


def failures(*ended_at: float) -> list[FailedRun]:
    return [FailedRun(f"run{i}", t, f"boom {i}") for i, t in enumerate(ended_at, 1)]


def test_a_batch_that_never_ran_runs_now_as_attempt_1():
    decision = decide_retry("shop", "K", [], now=100.0, max_attempts=3, base_seconds=10, retry_command=CMD)
    assert (decision.action, decision.attempt) == (Action.RUN, 1)


def test_a_failed_batch_waits_for_its_backoff_then_runs_again():
    waiting = decide_retry("shop", "K", failures(100.0), now=105.0, max_attempts=3, base_seconds=10, retry_command=CMD)
    assert waiting.action == Action.WAIT and "in 5 s" in waiting.message and "attempt 2 of 3" in waiting.message
    due = decide_retry("shop", "K", failures(100.0), now=110.0, max_attempts=3, base_seconds=10, retry_command=CMD)
    assert (due.action, due.attempt) == (Action.RUN, 2)


def test_backoff_doubles_from_the_newest_failure_and_is_capped():
    assert [backoff_seconds(n, 10) for n in range(5)] == [0, 10, 20, 40, 80]
    assert backoff_seconds(30, 10) == 3600
    # two failures: 20 s after the newer one, whatever order the runs come in
    assert decide_retry("s", "K", failures(200.0, 100.0), 215.0, 5, 10, CMD).action == Action.WAIT
    assert decide_retry("s", "K", failures(200.0, 100.0), 220.0, 5, 10, CMD).action == Action.RUN


def test_after_max_attempts_the_source_stops_naming_the_batch_the_error_and_the_command():
    decision = decide_retry("shop", "000001.0000000004-000001.0000000900", failures(1.0, 2.0, 3.0), now=1e9,
                            max_attempts=3, base_seconds=10, retry_command=CMD)
    assert decision.action == Action.GIVE_UP
    for part in ("000001.0000000004-000001.0000000900", "failed 3 times", "run3", "boom 3", CMD,
                 "no batch starts after an incomplete one"):
        assert part in decision.message
