"""dbt runs from its own folder (.venv/dbt, bin/setup): the processes that load the code location (code
servers, warm run workers, `dagster asset materialize`) load the dbt models without importing dbt-core, and
the venv's dbt still parses the project with the Spark adapter and is not asked for its version."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.config import ConfigError, parse_config
from ingest.defs.dbt import DbtCli, build_dbt_assets, dbt_executable

ROOT = Path(__file__).resolve().parents[2]
DBT_MODULES = ("dbt", "dbt_common", "dbt_adapters", "dbt_semantic_interfaces")


def _pin(name: str) -> str:
    lines = (ROOT / "dbt_project" / "requirements.txt").read_text().splitlines()
    return next(line.split("==")[1] for line in lines if line.startswith(f"{name}=="))


def test_the_code_location_loads_its_dbt_models_without_importing_dbt(tmp_path):
    # a fresh interpreter, as a code server or a warm run worker loads the location; the demo's sources file has dbt
    script = ("import json, sys\n"
              "import ingest.defs.definitions as d\n"
              "repo = d.defs.get_repository_def()\n"
              "groups = {a.group_names_by_key[k] for a in repo.assets_defs_by_key.values() for k in a.keys}\n"
              # a bare namespace package (no file: what a venv set up before dbt's folder leaves) holds no code
              f"loaded = [m for m, mod in sys.modules.items() if m.split('.')[0] in {DBT_MODULES!r}\n"
              "          and getattr(mod, '__file__', None)]\n"
              "print(json.dumps({'groups': sorted(groups), 'dbt_modules': sorted(loaded)}))\n")
    env = {**os.environ, "INGEST_SOURCES": str(ROOT / "sources.yaml"), "INGEST_LAKE_ROOT": str(tmp_path / "lake"),
           "INGEST_LOCAL_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert "analytics" in found["groups"], found  # the dbt models are there
    assert found["dbt_modules"] == [], found


def test_the_venvs_dbt_parses_the_project_with_the_spark_adapter(tmp_path):
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    project = ROOT / "dbt_project"
    out = subprocess.run([dbt_executable(), "parse", "--project-dir", str(project), "--profiles-dir", str(project),
                          "--target-path", str(tmp_path / "target"), "--log-path", str(tmp_path / "logs")],
                         capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    manifest = json.loads((tmp_path / "target" / "manifest.json").read_text())
    assert manifest["metadata"]["dbt_version"] == _pin("dbt-core")
    assert manifest["metadata"]["adapter_type"] == "spark"
    assert any(n["resource_type"] == "model" for n in manifest["nodes"].values())


def test_dbt_models_without_the_venvs_dbt_are_a_config_error_naming_the_fix(tmp_path, monkeypatch):
    # a venv made by `pip install` alone, without bin/setup: its bin holds no dbt
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    config = parse_config({"sources": {}, "dbt": {"project_dir": str(ROOT / "dbt_project")}}, "sources.yaml")
    with pytest.raises(ConfigError, match=r"sources.yaml: dbt models are configured.*bin/dbt does not exist.*bin/setup"):
        build_dbt_assets(config, str(tmp_path / "lake"), [])


def test_the_engines_version_comes_from_its_metadata_and_is_what_dbt_says(tmp_path):
    # dagster-dbt would run `dbt --version` before every dbt run to learn it
    said = subprocess.run([dbt_executable(), "--version"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}).stdout
    assert f"installed: {_pin('dbt-core')}" in said, said
    # an executable that would say otherwise is not asked
    other = tmp_path / "dbt"
    other.write_text("#!/bin/sh\necho 'Core:\n  - installed: 0.0.1'\n")
    other.chmod(0o755)
    resource = DbtCli(project_dir=str(ROOT / "dbt_project"), profiles_dir=str(ROOT / "dbt_project"),
                      dbt_executable=str(other))
    assert str(resource._cli_version) == _pin("dbt-core")
