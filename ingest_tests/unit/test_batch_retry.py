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


# ---------------------------------------------------------------- a table whose snapshot fails


def plan(starts, *, skipped_until=None, running=(), failures=None, cdc_started=False, now=1000.0):
    from ingest.batches import plan_tables

    return plan_tables("shop", starts, skipped_until or {}, set(running), failures or {}, cdc_started, now,
                       max_attempts=3, base_seconds=10)


def test_a_failed_snapshot_does_not_hold_back_the_start_of_cdc():
    p = plan({"a": 5, "geo": None}, failures={"geo": [FailedRun("r1", 995.0, "UnsupportedColumnType: ...")]})
    assert p.ready == {"a": 5} and not p.waiting
    assert "geo" in p.quarantined and "tables.columns.geo.exclude" in p.quarantined["geo"]
    assert p.snapshot == []  # its backoff (10 s after the failure at 995) is not over
    assert plan({"a": 5, "geo": None}, failures={"geo": [FailedRun("r1", 985.0, "x")]}).snapshot == ["geo"]


def test_tables_never_snapshotted_or_running_hold_back_the_start_but_not_later_batches():
    assert plan({"a": 5, "b": None}).waiting == ["b"]
    assert plan({"a": 5, "b": None}, running={"b"}).waiting == ["b"]
    assert plan({"a": 5, "b": None}, cdc_started=True).snapshot == ["b"]
    assert plan({"a": 5, "b": None}, running={"b"}, cdc_started=True).snapshot == []


def test_a_snapshot_older_than_a_batch_that_left_the_table_out_is_taken_again():
    p = plan({"a": 5, "geo": 7}, skipped_until={"geo": 9}, cdc_started=True)
    assert p.snapshot == ["geo"] and "geo" not in p.ready
    assert plan({"a": 5, "geo": 9}, skipped_until={"geo": 9}, cdc_started=True).ready == {"a": 5, "geo": 9}


def test_after_max_attempts_the_table_stays_out_until_fixed_by_hand():
    failed = [FailedRun(f"r{i}", 100.0 * i, "NoPrimaryKey: ...") for i in range(3)]
    p = plan({"a": 5, "nopk": None}, failures={"nopk": failed}, cdc_started=True, now=10_000.0)
    assert p.snapshot == [] and "failed 3 times" in p.quarantined["nopk"]
    assert "materialize shop/nopk/snapshot" in p.quarantined["nopk"]
