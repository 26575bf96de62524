"""The latest figure of every benchmark line, from bench/out/*.json, as a Markdown table: what
docs/performance.md shows (with the machine and the commit each figure was measured on).

    .venv/bin/python bench/report.py                 # print the table
    .venv/bin/python bench/report.py --write docs/performance.md   # replace the table in that file

bench/run.py keeps, per mode, the newest figure of each line it ever measured here (a run of some
lines leaves the others' figures in place); git keeps the history, not this table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import BENCH_DIR, fmt  # noqa: E402

BEGIN = "<!-- bench/report.py: the latest figures; regenerate, do not edit -->"
END = "<!-- end of bench/report.py's table -->"


def verdict(result: dict) -> str:
    """'met' / 'NOT met' against the line's target or limit, '' when it has none (pure)."""
    if result.get("target") is None and result.get("limit") is None:
        return ""
    bound = result.get("target") if result.get("target") is not None else result.get("limit")
    what = "ratio" if result.get("target") is not None else "ours"
    sign = ">=" if result.get("higher_is_better", True) else "<="
    return f"{what} {sign} {bound:g}: {'met' if result.get('meets_target') else 'NOT met'}"


def table(runs: list[dict]) -> str:
    """One row per line and mode, the machine of each mode's newest run under it (pure)."""
    rows = ["| line | mode | ours | baseline | ratio | target | commit, measured |", "|---|---|---|---|---|---|---|"]
    machines = []
    for run in sorted(runs, key=lambda r: r.get("mode", "")):
        box = run.get("machine", {})
        machines.append(f"- {run.get('mode')}: {box.get('cores')} cores, {box.get('cpu')}, {box.get('memory_gib')} GiB, "
                        f"Python {box.get('python')}, {box.get('java')}, "
                        + ", ".join(f"{k} {v}" for k, v in (box.get("packages") or {}).items()))
        for r in sorted(run.get("results", []), key=lambda r: r["name"]):
            ratio = r.get("ratio")
            rows.append(f"| `{r['name']}` | {run.get('mode')} | {fmt(r['ours'])} {r['unit']} | "
                        f"{r['baseline_name']} {fmt(r['baseline'])} {r['unit']} | "
                        f"{'' if ratio is None or ratio != ratio else fmt(ratio)} | {verdict(r)} | "
                        f"{r.get('commit', '?')}, {r.get('measured_at', '?')} |")
    return "\n".join(rows) + "\n\nMachines:\n\n" + "\n".join(machines) + "\n"


def write_into(path: Path, text: str) -> None:
    """Replace what is between the markers in `path` with `text`."""
    doc = path.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} section to replace")
    head, rest = doc.split(BEGIN, 1)
    path.write_text(f"{head}{BEGIN}\n\n{text}\n{END}{rest.split(END, 1)[1]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="a Markdown file whose marked section gets the table")
    args = parser.parse_args(argv)
    runs = [json.loads(p.read_text()) for p in sorted((BENCH_DIR / "out").glob("*.json"))]
    text = table(runs)
    if args.write:
        write_into(args.write, text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
