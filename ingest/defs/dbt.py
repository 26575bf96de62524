"""The dbt project's models as Dagster assets, downstream of the silver tables they read.

dbt runs on the project's Spark Connect server through dbt-spark's session
method: `dbt build` is a subprocess whose SparkSession joins the run's own
Connect session (SPARK_REMOTE with its session id), so it has the same server,
lake and S3A settings as every other run and starts no JVM of its own. Its
`on-run-start` hook registers each dbt source, a silver Delta table, by name
in the server's catalog (see dbt_project/macros/register_silver.sql). Each dbt
source names its silver asset in `meta.dagster.asset_key`; that is what puts
the models downstream of silver.
"""

# No `from __future__ import annotations`: Dagster inspects the context annotation at definition time.

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

from dagster import AssetExecutionContext, AssetKey, AssetsDefinition, Failure
from dagster_dbt import DagsterDbtTranslator, DbtCliResource, dbt_assets

from ingest.config import ConfigError, SourcesConfig
from ingest.defs.resources import SparkResource

GROUP = "analytics"


def dbt_executable() -> str:
    """The venv's dbt (bin/setup writes it; dbt itself is in .venv/dbt): a run worker's PATH need not
    include the venv."""
    return str(Path(sys.executable).parent / "dbt")


def dbt_folder() -> Path:
    """Where bin/setup installs dbt (dbt_project/requirements.txt), next to the venv's bin."""
    return Path(sys.prefix) / "dbt"


def check_dbt_installed(config: SourcesConfig) -> None:
    """dbt is not a dependency of the package (dbt_project/requirements.txt): a venv made without
    bin/setup has no dbt, which `dbt parse` and every dbt run would fail on with a bare 'No such file'."""
    executable = Path(dbt_executable())
    if not os.access(executable, os.X_OK):
        raise ConfigError(f"{config.path}: dbt models are configured (dbt.project_dir), but {executable} does not "
                          "exist. Fix: run bin/setup, which installs dbt_project/requirements.txt into .venv/dbt and "
                          "writes that script, or remove `dbt:` from the sources file")


class DbtCli(DbtCliResource):
    """dagster-dbt's resource without its in-process dbt adapter. dbt-core is not importable where Dagster
    runs (dbt_project/requirements.txt says why), and the adapter serves only metadata this project does
    not fetch (row counts, column schemas); without this, each dbt run would log the failed attempt to
    make one as a warning."""

    def _initialize_dbt_core_adapter(self, args):
        return None

    @cached_property
    def _cli_version(self):
        """The engine's version from its package metadata in .venv/dbt. dagster-dbt would run `dbt --version`
        before every dbt run for it: a dbt process of its own (2 s), which also asks PyPI for the newest
        release. Without that metadata, dagster-dbt's own way."""
        from importlib.metadata import distributions

        from packaging.version import Version

        found = [d.version for d in distributions(path=[str(dbt_folder())]) if d.metadata["Name"] == "dbt-core"]
        return Version(found[0]) if found else super()._cli_version


def project_dir(config: SourcesConfig) -> Path:
    base = config.path.parent if config.path else Path.cwd()
    return (base / config.dbt.project_dir).resolve()


def manifest_is_stale(project: Path, manifest: Path) -> bool:
    """True when the manifest is missing or older than any model, macro or project file."""
    if not manifest.exists():
        return True
    built = manifest.stat().st_mtime
    return any(p.stat().st_mtime > built for p in project.rglob("*")
               if p.suffix in (".sql", ".yml", ".yaml") and "target" not in p.relative_to(project).parts
               and "logs" not in p.relative_to(project).parts)


def prepare_manifest(project: Path) -> Path:
    """`dbt parse` when the manifest is stale; a lock keeps parallel loaders from parsing at once."""
    manifest = project / "target" / "manifest.json"
    if not manifest_is_stale(project, manifest):
        return manifest
    (project / "target").mkdir(exist_ok=True)
    with open(project / "target" / ".parse.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if manifest_is_stale(project, manifest):
            parse = subprocess.run([dbt_executable(), "parse", "--project-dir", str(project),
                                    "--profiles-dir", str(project)],
                                   capture_output=True, text=True, env={**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"})
            if parse.returncode != 0:
                raise ConfigError(f"{project}: `dbt parse` failed, so the dbt models cannot load. Fix the project; "
                                  f"dbt said:\n{parse.stdout[-3000:]}{parse.stderr[-2000:]}")
    return manifest


def silver_sources(manifest: dict) -> dict[AssetKey, str]:
    """Each dbt source that names an asset key, by that key: `source.table` for messages."""
    out = {}
    for node in manifest["sources"].values():
        key = node.get("meta", {}).get("dagster", {}).get("asset_key")
        if key:
            out[AssetKey(key)] = f"{node['source_name']}.{node['name']}"
    return out


def check_sources(manifest: dict, known: Iterable[AssetKey], config: SourcesConfig, project: Path) -> None:
    """Every dbt source must be a silver asset of the sources file, or dbt would read a table nobody lands."""
    known = set(known)
    for key, name in silver_sources(manifest).items():
        if key not in known:
            raise ConfigError(
                f"{project}: dbt source {name} reads the asset {key.to_user_string()}, which {config.path} does "
                f"not define. Fix: add the table to sources.{key.path[0]} in {config.path}, or remove it from "
                "the dbt sources")


class Translator(DagsterDbtTranslator):
    """dbt models in one `analytics` group, with kinds for where they run and what they write."""

    def get_asset_spec(self, manifest, unique_id, project):
        spec = super().get_asset_spec(manifest, unique_id, project)
        if manifest_node(manifest, unique_id)["resource_type"] == "source":
            return spec
        return spec.replace_attributes(group_name=GROUP).merge_attributes(kinds={"spark", "delta"})


def manifest_node(manifest, unique_id: str) -> dict:
    return manifest["sources"][unique_id] if unique_id in manifest["sources"] else manifest["nodes"][unique_id]


def missing_silver(lake_root: str, keys: Iterable[AssetKey]) -> list[str]:
    """Silver tables a dbt run would read that have no Delta log yet (local lakes only)."""
    if "://" in lake_root:
        return []
    return [k.to_user_string() for k in keys
            if not (Path(lake_root).joinpath(*k.path, "silver") / "_delta_log").is_dir()]


@contextmanager
def environment(values: dict[str, str]):
    """`values` in os.environ inside the block, and what was there before restored after it."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def build_dbt_assets(config: SourcesConfig, lake_root: str, known: Iterable[AssetKey]) -> tuple[AssetsDefinition, DbtCli]:
    check_dbt_installed(config)
    project = project_dir(config)
    manifest_path = prepare_manifest(project)
    manifest = json.loads(manifest_path.read_text())
    check_sources(manifest, known, config, project)
    upstream = list(silver_sources(manifest))

    @dbt_assets(manifest=manifest_path, dagster_dbt_translator=Translator(), name="dbt_models")
    def _dbt_models(context: AssetExecutionContext, dbt: DbtCliResource, spark: SparkResource):
        reads = {dep for key in context.selected_asset_keys for dep in context.assets_def.asset_deps.get(key, ())}
        missing = missing_silver(lake_root, [k for k in upstream if k in reads])
        if missing:
            raise Failure(f"dbt reads silver tables that have no data yet: {', '.join(missing)}. Fix: materialize "
                          "their snapshot and silver assets first (or let the sensor do it), then run dbt again")
        # dbt's subprocess inherits this process's environment: with SPARK_REMOTE set, dbt-spark's
        # `SparkSession.builder...getOrCreate()` returns a Connect session, here the run's own. Only for
        # dbt's run: left in place, it would reach every process this one starts later.
        with environment({"SPARK_REMOTE": spark.join_url(), "INGEST_LAKE_ROOT": lake_root}):
            yield from dbt.cli(["build", "--vars", json.dumps({"lake_root": lake_root})], context=context).stream()

    resource = DbtCli(project_dir=str(project), profiles_dir=str(project), dbt_executable=dbt_executable())
    return _dbt_models, resource
