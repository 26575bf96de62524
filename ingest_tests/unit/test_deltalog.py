"""Our commits read from a `_delta_log` folder without Spark (the files are what Delta writes)."""

import json

from ingest.lake.commits import Txn, encode_user_metadata
from ingest.lake.deltalog import last_commit, our_commits, version_file


def write_log(folder, commits, checkpoint=None):
    log = folder / "_delta_log"
    log.mkdir(parents=True)
    for version, meta in enumerate(commits):
        info = {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE",
                "operationMetrics": {"numOutputRows": str(version)}}
        if meta is not None:
            info["userMetadata"] = encode_user_metadata(meta, Txn("app", version))
        lines = [{"commitInfo": info}, {"add": {"path": f"part-{version}.parquet"}}]
        (log / version_file(version)).write_text("\n".join(json.dumps(x) for x in lines))
    if checkpoint is not None:
        (log / "_last_checkpoint").write_text(json.dumps({"version": checkpoint, "size": 3}))


def test_newest_first_with_other_writers_commits_left_out(tmp_path):
    write_log(tmp_path, [{"kind": "bronze", "batch": "a"}, None, {"kind": "bronze", "batch": "b"}])
    found = list(our_commits(str(tmp_path)))
    assert [(c.version, c.metadata["batch"]) for c in found] == [(2, "b"), (0, "a")]
    assert found[0].metrics == {"numOutputRows": "2"}
    assert last_commit(str(tmp_path), kind="bronze", batch="a").version == 0
    assert last_commit(str(tmp_path), batch="zzz") is None


def test_the_newest_version_is_found_from_the_last_checkpoint_on(tmp_path):
    write_log(tmp_path, [{"kind": "x", "n": n} for n in range(13)], checkpoint=10)
    assert next(our_commits(str(tmp_path))).metadata["n"] == 12


def test_no_table_is_no_commits(tmp_path):
    assert list(our_commits(str(tmp_path / "missing"))) == []


def test_commit_records_keep_the_metadata_and_txn_ids_earlier_commits_have():
    """Lakes written before the records were typed are read by the same keys: the typed records must
    give exactly the metadata and txn ids the dicts gave."""
    from ingest.lake.commits import BronzeCommit, SilverCommit
    from ingest.lake.snapshot import SnapshotCommit

    bronze = BronzeCommit("shop", "orders", "k1", {"start": "a", "end": "b"})
    assert bronze.metadata() == {"kind": "bronze", "source": "shop", "table": "orders", "batch": "k1",
                                 "start": "a", "end": "b"}
    assert bronze.txn == Txn("bronze:shop:k1", 0)
    snap = SilverCommit("shop", "orders", "s1", log_start="f.000001:4")
    assert snap.metadata() == {"kind": "silver", "source": "shop", "table": "orders", "snapshot_id": "s1",
                               "from": "snapshot", "log_start": "f.000001:4"}
    assert snap.txn == Txn("silver:shop.orders:snapshot:s1", 0)
    catch_up = SilverCommit("shop", "orders", "s1", catch_up_from="f.000001:4")
    assert catch_up.metadata()["caught_up"] and catch_up.txn == Txn("silver:shop.orders:catchup:s1", 0)
    batch = SilverCommit("shop", "orders", "s1", batch="k1", end="b")
    assert batch.metadata() == {"kind": "silver", "source": "shop", "table": "orders", "snapshot_id": "s1",
                                "batch": "k1", "end": "b", "caught_up": True}
    assert batch.txn == Txn("silver:shop.orders:k1", 0)
    wave = SnapshotCommit("shop", "orders", "s1", "fp", ("id",), "f.000001:4", 40, wave=2,
                          progress={"key_hi": [9], "chunks_done": 3})
    assert wave.metadata() == {"kind": "snapshot", "source": "shop", "table": "orders", "snapshot_id": "s1",
                               "wave": 2, "complete": False, "fingerprint": "fp", "key_columns": ["id"],
                               "log_start": "f.000001:4", "log_start_pos": 40, "key_hi": [9], "chunks_done": 3}
    assert wave.txn == Txn("snapshot:shop.orders:s1", 2)


def test_a_bronze_commit_carries_the_summary_silver_merges_by():
    """Silver's merge of a batch reads its row count, TRUNCATE positions and newest commit time from the
    bronze commit instead of a Spark job: the summary must say what the records say and survive JSON."""
    import datetime as dt
    import json

    from ingest.changes import ChangeOp, ChangeRecord
    from ingest.lake.bronze import BatchSummary, summarize
    from ingest.lake.commits import BronzeCommit

    at = dt.datetime(2026, 11, 25, 9, 0, 0, 900_000)
    records = [ChangeRecord("orders", ChangeOp.INSERT, 2**64 + 5, {"id": 1}, committed_at=at),
               ChangeRecord("orders", ChangeOp.TRUNCATE, 2**64 + 9, {}, committed_at=at.replace(second=3)),
               ChangeRecord("orders", ChangeOp.DELETE, 2**64 + 12, {"id": 1},
                            committed_at=at.replace(second=2, tzinfo=dt.timezone.utc)),
               ChangeRecord("orders", ChangeOp.UPDATE, 2**64 + 14, {"id": 2})]
    summary = summarize(records)
    # a naive commit time is UTC, as bronze's _ts; seconds floored, as Spark's unix_timestamp
    utc = at.replace(tzinfo=dt.timezone.utc)
    assert summary == BatchSummary(3, (2**64 + 9,), int(utc.replace(second=3).timestamp()), int(utc.timestamp()))
    meta = BronzeCommit("shop", "orders", "k1", {"end": "b"}, summary.to_metadata()).metadata()
    assert BatchSummary.from_metadata(json.loads(json.dumps(meta))["summary"]) == summary
    assert summarize([]) == BatchSummary(0, (), None)


def test_a_summary_planned_before_its_rows_were_counted_takes_the_count_from_its_commit():
    """A batch executors decode is summarized by the planning pass (TRUNCATEs, newest commit) before any
    row is counted: the bronze commit's row count, less its TRUNCATE rows, completes it; a commit
    without operation metrics leaves silver to count."""
    import json

    from ingest.lake.bronze import BatchSummary

    planned = BatchSummary(None, (2**64 + 9, 2**64 + 30), 1_795_000_000)
    stored = BatchSummary.from_metadata(json.loads(json.dumps(planned.to_metadata())))
    assert stored == planned
    assert stored.counted({"numOutputRows": "1002", "numFiles": "3"}) == BatchSummary(1000, planned.truncates,
                                                                                        1_795_000_000)
    spanned = BatchSummary(None, (), 1_795_000_000, 1_794_999_950)
    assert BatchSummary.from_metadata(json.loads(json.dumps(spanned.to_metadata()))) == spanned
    assert spanned.counted({"numOutputRows": "4"}) == BatchSummary(4, (), 1_795_000_000, 1_794_999_950)
    assert stored.counted({}) is None
    known = BatchSummary(7, (), None)
    assert known.counted({"numOutputRows": "99"}) is known


def test_silver_reports_the_lag_of_the_batch_change_that_waited_longest():
    """A user who times a row from its commit to silver sees up to the oldest change's wait: that is
    `lag_seconds`; the newest change's is `lag_seconds_newest`. A bronze commit of an earlier version
    knows only the newest."""
    from ingest.lake.silver import BronzeMerge

    merged = BronzeMerge(None, 3, newest_epoch=1_000, oldest_epoch=990)
    assert merged.lags(1_004.04) == {"lag_seconds": 14.0, "lag_seconds_newest": 4.0}
    assert BronzeMerge(None, 3, 1_000, None).lags(1_004.0) == {"lag_seconds": 4.0, "lag_seconds_newest": 4.0}
    assert BronzeMerge(None, 0, None, None).lags(1_004.0) == {}


def test_s3_refusals_name_the_endpoint_bucket_and_fix_and_never_its_credentials():
    """What botocore raises when the lake's S3 refuses, as the error a user acts on (the integration tier
    meets the first two from a closed port and moto); another error is not one of them."""
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    from ingest.lake.deltalog import s3_refusal

    endpoint = "http://lake-user:s3cret-marker@10.0.0.5:9000"

    def said(exc):
        refusal = s3_refusal(exc, "lake", "t/_delta_log/_last_checkpoint", endpoint)
        assert refusal is not None and "s3cret-marker" not in str(refusal) and "Nothing was written" in str(refusal)
        return str(refusal)

    assert "endpoint http://10.0.0.5:9000 does not answer (EndpointConnectionError)" in said(
        EndpointConnectionError(endpoint_url=endpoint))
    assert "no AWS credentials" in said(NoCredentialsError())

    def client_error(code):
        return ClientError({"Error": {"Code": code, "Message": "m"}}, "GetObject")

    assert "has no bucket 'lake'" in said(client_error("NoSuchBucket"))
    for code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
        assert f"refused to read s3://lake/t/_delta_log/_last_checkpoint ({code})" in said(client_error(code))
    assert s3_refusal(client_error("SlowDown"), "lake", "k", endpoint) is None  # botocore retries those
    assert s3_refusal(ValueError("x"), "lake", "k", endpoint) is None


def _wave(log, version, wave, files, snapshot_id="s1"):
    """A snapshot wave's commit as Delta writes it: commitInfo, then an add per file with its statistics
    (`files`: (rows, lowest _pos, highest _pos), or None for a file written without statistics)."""
    meta = {"kind": "snapshot", "source": "shop", "table": "orders", "snapshot_id": snapshot_id, "wave": wave}
    lines = [{"commitInfo": {"operation": "WRITE", "userMetadata": encode_user_metadata(meta, Txn("app", wave))}}]
    for i, f in enumerate(files):
        stats = None if f is None else json.dumps({"numRecords": f[0], "minValues": {"id": 1, "_pos": f[1]},
                                                   "maxValues": {"id": 9, "_pos": f[2]}, "nullCount": {"_pos": 0}})
        lines.append({"add": {"path": f"part-{version}-{i}.parquet", **({"stats": stats} if stats else {})}})
    (log / version_file(version)).write_text("\n".join(json.dumps(x) for x in lines))


def test_a_snapshots_rows_and_pos_range_come_from_its_waves_file_statistics(tmp_path):
    from ingest.lake.snapshot import snapshot_positions

    log = tmp_path / "_delta_log"
    log.mkdir()
    # an earlier snapshot, which wave 0 of s1 replaced; s1's positions beyond 2**64, as MariaDB's are
    _wave(log, 0, 0, [(5, 1, 2)], snapshot_id="s0")
    _wave(log, 1, 0, [(3, 10**20 + 7, 10**20 + 9), (4, 10**20 + 3, 10**20 + 8)])
    _wave(log, 2, 1, [(6, 10**20 + 11, 10**20 + 12)])
    assert snapshot_positions(str(tmp_path), "s1") == (13, 10**20 + 3, 10**20 + 12)
    assert snapshot_positions(str(tmp_path), "s0") == (5, 1, 2)
    # a file without statistics: no answer from the log (the caller scans the table)
    _wave(log, 3, 2, [None])
    assert snapshot_positions(str(tmp_path), "s1") is None
    # a log that no longer reaches the first wave: no answer either
    (log / version_file(1)).unlink()
    assert snapshot_positions(str(tmp_path), "s0") is None


def _parquet(folder, name, positions, row_group_size=None):
    """A Parquet file of a snapshot's shape (`id`, `_pos` decimal(38,0)) as the table's file `name`."""
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": pa.array(range(len(positions)), pa.int64()),
                      "_pos": pa.array([None if p is None else decimal.Decimal(p) for p in positions],
                                       pa.decimal128(38, 0))})
    pq.write_table(table, folder / name, row_group_size=row_group_size)


def test_without_delta_statistics_on_pos_the_range_comes_from_the_parquet_footers(tmp_path):
    from ingest.lake.snapshot import snapshot_positions

    log = tmp_path / "_delta_log"
    log.mkdir()
    meta = {"kind": "snapshot", "source": "shop", "table": "orders", "snapshot_id": "s1"}
    big = 10**20  # MariaDB's positions are beyond 2**64

    def wave(version, wave, files):
        lines = [{"commitInfo": {"operation": "WRITE",
                                 "userMetadata": encode_user_metadata({**meta, "wave": wave}, Txn("app", wave))}}]
        for name, positions in files:
            _parquet(tmp_path, name, positions, row_group_size=2)
            # Delta's statistics on the key only, as a snapshot wave now writes them
            stats = {"numRecords": len(positions), "minValues": {"id": 0}, "maxValues": {"id": 9}, "nullCount": {"id": 0}}
            lines.append({"add": {"path": name.replace(" ", "%20"), "stats": json.dumps(stats)}})
        (log / version_file(version)).write_text("\n".join(json.dumps(x) for x in lines))

    # a name an add action URL-encodes; row groups of two rows, each with its own range; an empty file
    wave(0, 0, [("part a.parquet", [big + 7, big + 7, big + 5]), ("part-b.parquet", [])])
    wave(1, 1, [("part-c.parquet", [big + 9, None, None, big + 12])])
    assert snapshot_positions(str(tmp_path), "s1") == (7, big + 5, big + 12)


def test_footer_ranges_per_row_group_a_second_read_for_a_large_footer_none_without_file_or_column(tmp_path):
    from ingest.lake.deltalog import log_store
    from ingest.lake.snapshot import parquet_ranges

    _parquet(tmp_path, "f.parquet", [3, 1, 8, 2, 5], row_group_size=2)
    store = log_store(str(tmp_path))
    whole = parquet_ranges(store, "f.parquet", "_pos")
    assert whole == [(1, 3), (2, 8), (5, 5)]
    assert parquet_ranges(store, "f.parquet", "_pos", read=16) == whole  # 16 bytes: only the footer's length
    assert parquet_ranges(store, "f.parquet", "no_such_column") is None
    assert parquet_ranges(store, "missing.parquet", "_pos") is None
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    assert parquet_ranges(store, "bad.parquet", "_pos") is None


def test_a_file_without_pos_statistics_in_its_footer_gives_no_range(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ingest.lake.deltalog import log_store
    from ingest.lake.snapshot import parquet_ranges

    pq.write_table(pa.table({"_pos": pa.array([1, 2], pa.int64())}), tmp_path / "f.parquet", write_statistics=False)
    assert parquet_ranges(log_store(str(tmp_path)), "f.parquet", "_pos") is None


def test_file_spread_counts_files_by_their_share_of_the_bytes():
    from ingest.lake.deltalog import file_spread

    def checksum(*bins, files=None):  # (files, bytes) per histogram bin
        return {"numFiles": files if files is not None else sum(n for n, _ in bins),
                "fileSizeHistogram": {"sortedBinBoundaries": list(range(len(bins))),
                                      "fileCounts": [n for n, _ in bins], "totalBytes": [b for _, b in bins]}}

    assert file_spread(checksum((20, 20 * 4096))) == 20  # equal files: their count
    # 11 files of 10 MB and the 90 of 10 KB that merges added since the last compaction
    spread = file_spread(checksum((90, 90 * 10_240), (0, 0), (11, 11 * 10 * 2**20)))
    assert 11 <= spread < 11.2, spread
    assert file_spread({"numFiles": 7}) == 7.0  # a writer that keeps no histogram
    assert file_spread({"numFiles": 3, "fileSizeHistogram": {"fileCounts": [0], "totalBytes": [0]}}) == 3.0
    assert file_spread({}) is None
