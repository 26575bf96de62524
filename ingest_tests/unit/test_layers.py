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


def test_loading_the_code_location_leaves_out_what_no_run_needs_at_its_start(tmp_path):
    """Every run is a new process that loads the code location before its first step: the AWS SDKs,
    the Spark Connect client, the binlog, PostgreSQL and Delta libraries are imported only when a step
    uses them (dagster_aws alone took 0.45 s of each start)."""
    import os
    import subprocess
    import sys

    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  one:\n    kind: mysql\n    host: 127.0.0.1\n    port: 3999\n    user: u\n"
                       "    password_env: ONE_PASSWORD\n    database: d\n    tables: {include: [t]}\n")
    heavy = ["dagster_aws", "boto3", "botocore", "pyspark.sql.connect", "grpc", "pymysqlreplication", "psycopg",
             "deltalake", "pyarrow"]
    code = ("import sys, ingest.defs.definitions as d; d.defs.get_repository_def(); "
            f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
    env = {**os.environ, "INGEST_SOURCES": str(sources), "INGEST_LAKE_ROOT": str(tmp_path / "lake")}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=str(PACKAGE.parent))
    assert out.stdout.strip() == "", f"imported at load: {out.stdout.strip()}"


def module_graph() -> dict[str, set[str]]:
    """Every module of the package and the package modules it imports, lazy imports included (pure)."""
    modules = {".".join(("ingest", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"): p
               for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from ingest.a import b` imports ingest.a.b when b is a module, else ingest.a
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm; pure)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_import_circles_are_found():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_package_imports_one_that_imports_it_back():
    """No import circle anywhere in ingest/, lazy imports included: each module can be read (and loaded)
    knowing only the ones below it."""
    graph = module_graph()
    assert "ingest.defs.mysql" in graph["ingest.defs.sources"]  # the walk sees lazy imports
    assert import_circles(graph) == []


def test_the_status_command_does_not_load_dagster_definitions():
    assert not [m for m in module_graph()["ingest.status"] if m.startswith("ingest.defs")]
