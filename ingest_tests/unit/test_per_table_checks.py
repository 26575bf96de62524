"""A source's checks: one definition per check for all its tables, running the tables selected.

Every run's process loads every definition of the code location; a definition per table and check made
a 500-table source's batch runs pay for 2,000 of them.
"""

from dagster import (
    AssetCheckKey, AssetCheckResult, AssetKey, AssetSelection, AssetSpec, DagsterInstance, ResourceDefinition,
    materialize,
)

from ingest.config import parse_config
from ingest.defs.checks import per_table_check
from ingest.defs.sources import build_source_defs


def test_a_source_has_one_definition_per_check_whatever_its_number_of_tables(tmp_path):
    tables = [f"t{i:02d}" for i in range(40)]
    config = parse_config({"sources": {"demo": {
        "host": "h", "user": "u", "password_env": "P", "database": "d", "tables": {"include": tables}}}},
        "sources.yaml")
    (source,) = build_source_defs(config, str(tmp_path))

    keys = {key for check in source.checks for key in check.check_keys}
    per_table = {"contiguity": "changes", "retention_headroom": "changes", "freshness": None, "reconciliation": None}
    assert keys == {AssetCheckKey(AssetKey(["demo", "_batch_log"]), "batch_contiguity")} | {
        AssetCheckKey(AssetKey(["demo", t, *([layer] if layer else [])]), check)
        for t in tables for check, layer in per_table.items()}
    assert len(source.checks) == 1 + len(per_table)


KEYS = {t: AssetKey(["src", t]) for t in ("a", "b", "c", "d")}


def run_probe(selected: list[str], raising: set[str]):
    """Run a per-table check on the `selected` tables; (the tables it evaluated, the run's result)."""
    evaluated = []

    def evaluate(context, table):
        evaluated.append(table)
        if table in raising:
            raise ConnectionError(f"{table}'s source is unreachable")
        return AssetCheckResult(passed=table != "c", description=f"{table} checked")

    check = per_table_check("src", "probe", KEYS, lambda t: f"probe of {t}", evaluate)
    result = materialize([*(AssetSpec(k) for k in KEYS.values()), check],
                         selection=AssetSelection.checks(*(AssetCheckKey(KEYS[t], "probe") for t in selected)),
                         resources={"lake": ResourceDefinition.none_resource()}, raise_on_error=False,
                         instance=DagsterInstance.ephemeral())
    return evaluated, result


def test_a_per_table_check_evaluates_only_the_tables_selected():
    evaluated, result = run_probe(["a", "c"], raising=set())

    assert result.success and evaluated == ["a", "c"]
    verdicts = {e.asset_key: (e.passed, e.description) for e in result.get_asset_check_evaluations()}
    assert verdicts == {KEYS["a"]: (True, "a checked"), KEYS["c"]: (False, "c checked")}


def test_a_table_whose_check_raises_fails_the_step_after_the_other_tables_are_checked():
    evaluated, result = run_probe(["a", "b", "c", "d"], raising={"b", "d"})

    assert evaluated == ["a", "b", "c", "d"]
    assert {e.asset_key for e in result.get_asset_check_evaluations()} == {KEYS["a"], KEYS["c"]}
    (failure,) = result.get_step_failure_events()
    message = str(failure.step_failure_data.error.to_string())
    assert "tables ['b', 'd']" in message and "b's source is unreachable" in message \
        and "d's source is unreachable" in message
