"""The layers stay apart (sources produce, the lake commits): every import, lazy ones included, read from
the source code."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ingest"


def imports(folder: str) -> list[tuple[str, str]]:
    found = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(path.name, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.append((path.name, node.module))
    return found


@pytest.mark.parametrize("folder, banned", [
    ("sources", ("ingest.lake", "ingest.adapters", "ingest.defs", "dagster")),  # dagster_aws, dagster_* too
    ("lake", ("ingest.sources", "ingest.adapters", "ingest.defs", "dagster")),
    ("adapters", ("ingest.defs", "dagster")),
])
def test_a_layer_imports_nothing_of_the_layers_it_must_not_know(folder, banned):
    found = imports(folder)
    assert found, folder  # the walk saw the modules
    wrong = [(f, m) for f, m in found if m.startswith(banned)]
    assert not wrong, wrong
