"""The supervisor bin/demo runs Dagster and Spark with: it reads deploy/systemd's units as systemd would."""

from pathlib import Path

import pytest

from ingest.localdev.supervise import UnitError, expand, parse_unit, read_env_file

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_every_unit_runs_with_the_shipped_environment_and_names_the_code_location():
    env = read_env_file(DEPLOY / "ingest.env")
    units = {p.stem: parse_unit(p, env) for p in sorted((DEPLOY / "systemd").glob("*.service"))}
    assert set(units) == {"ingest-code-server", "ingest-daemon", "ingest-spark", "ingest-webserver"}
    code = units["ingest-code-server"].command
    assert code[:3] == ["/opt/ingest/.venv/bin/dagster", "code-server", "start"]
    assert code[code.index("-m") + 1] == "ingest.defs.definitions" and code[code.index("-p") + 1] == "4266"
    for name in ("ingest-daemon", "ingest-webserver"):  # both reach the code server the workspace names
        assert "/opt/ingest/deploy/workspace.yaml" in units[name].command[-1], units[name].command
        # and start only once the instance's storage answers (ExecStartPre), as systemd would
        assert units[name].command[:3] == ["/bin/sh", "-c", units[name].command[-1]]
        assert units[name].command[-1].startswith("/opt/ingest/.venv/bin/ingest instance && exec /opt/ingest/")
    assert all(u.restart_seconds == 2 for u in units.values())
    assert "INGEST_CODE_SERVER_PORT" in (DEPLOY / "workspace.yaml").read_text()


def test_a_variable_a_unit_needs_and_nobody_set_is_named(tmp_path):
    assert expand("${A}/bin $B", {"A": "/x", "B": "y"}, "u") == "/x/bin y"
    with pytest.raises(UnitError, match=r"u.service ExecStart: \$\{PORT\} is not set"):
        parse_unit(_unit(tmp_path, "ExecStart=/bin/serve -p ${PORT}"), {})
    with pytest.raises(UnitError, match="no ExecStart="):
        parse_unit(_unit(tmp_path, "Restart=always"), {})


def _unit(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "u.service"
    path.write_text(f"[Service]\n{line}\n")
    return path
