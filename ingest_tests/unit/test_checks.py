"""Verdicts of the contiguity, freshness and retention headroom checks."""

from ingest.checks import CommittedBatch, contiguity, freshness, retention_headroom
from ingest.sources.mysql.positions import BinlogPosition


def pos(seq, offset):
    return BinlogPosition(f"mysql-bin.{seq:06d}", offset)


def cmp(a, b):
    return (a > b) - (a < b)


def test_contiguous_batches_pass():
    batches = [CommittedBatch("a", pos(1, 4), pos(1, 900)), CommittedBatch("b", pos(1, 900), pos(2, 300))]
    verdict = contiguity(batches, cmp, log_start=pos(1, 4))
    assert verdict.passed and verdict.metadata == {"batches": 2, "gaps": 0, "overlaps": 0}


def test_a_gap_fails_naming_both_batches():
    batches = [CommittedBatch("a", pos(1, 4), pos(1, 900)), CommittedBatch("b", pos(1, 950), pos(2, 300))]
    verdict = contiguity(batches, cmp, log_start=pos(1, 4))
    assert not verdict.passed and not verdict.warn_only
    assert "GAP" in verdict.description and "a ends at" in verdict.description and "b starts at" in verdict.description


def test_an_overlap_fails_as_a_warning():
    batches = [CommittedBatch("a", pos(1, 4), pos(1, 900)), CommittedBatch("b", pos(1, 500), pos(2, 300))]
    verdict = contiguity(batches, cmp, log_start=pos(1, 4))
    assert not verdict.passed and verdict.warn_only and "OVERLAP" in verdict.description


def test_a_first_batch_starting_after_the_snapshot_log_start_is_a_gap():
    verdict = contiguity([CommittedBatch("a", pos(1, 100), pos(1, 900))], cmp, log_start=pos(1, 4))
    assert not verdict.passed and "log start" in verdict.description


def test_checkpoints_that_only_compare_for_equality():
    ok = [CommittedBatch("00000001", {"s": 1}, {"s": 2}), CommittedBatch("00000002", {"s": 2}, {"s": 3})]
    bad = [CommittedBatch("00000001", {"s": 1}, {"s": 2}), CommittedBatch("00000002", {"s": 5}, {"s": 6})]
    assert contiguity(ok, lambda a, b: None, None).passed
    assert not contiguity(bad, lambda a, b: None, None).passed


def test_freshness_is_judged_only_when_the_source_is_ahead():
    assert freshness(False, 99999, 900).passed
    assert freshness(False, 99999, 900).metadata["lag_seconds"] == 0
    assert freshness(True, 30, 900).passed
    stale = freshness(True, 1200, 900)
    assert not stale.passed and stale.metadata["lag_seconds"] == 1200 and "STALE" in stale.description
    assert not freshness(True, None, 900).passed


def test_retention_headroom():
    never = retention_headroom(end_seq=5, oldest_seq=5, head_seq=5, expiry_seconds=0)
    assert never.passed and never.description.startswith("no expiry set")
    assert retention_headroom(end_seq=5, oldest_seq=3, head_seq=6).passed
    assert retention_headroom(end_seq=5, oldest_seq=3, head_seq=6).metadata["headroom_files"] == 2
    assert retention_headroom(end_seq=5, oldest_seq=5, head_seq=5).passed  # the end is in the active file
    at_risk = retention_headroom(end_seq=5, oldest_seq=5, head_seq=7)
    assert not at_risk.passed and at_risk.warn_only
    gone = retention_headroom(end_seq=5, oldest_seq=6, head_seq=7)
    assert not gone.passed and not gone.warn_only and "GONE" in gone.description


def test_slot_headroom_names_a_gone_or_invalidated_slot_and_warns_before_the_limit():
    from ingest.checks import slot_headroom

    mib = 1024 * 1024
    assert not slot_headroom("s", None, 0, None).passed and "does not exist" in slot_headroom("s", None, 0, None).description
    lost = slot_headroom("s", "lost", 0, None)
    assert not lost.passed and not lost.warn_only and "invalidated" in lost.description
    for risky in (slot_headroom("s", "unreserved", 900 * mib, 10 * mib), slot_headroom("s", "reserved", mib, 10 * mib)):
        assert not risky.passed and risky.warn_only and "max_slot_wal_keep_size" in risky.description
    fine = slot_headroom("s", "reserved", 5 * mib, None)
    assert fine.passed and "no limit set" in fine.description and fine.metadata["retained_wal_mib"] == 5.0
