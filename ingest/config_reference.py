"""Every key of the sources file, read from its model (ingest/config.py): what docs/configuration.md
lists. `python -m ingest.config_reference` prints the tables that file holds; a unit test fails when a
key of the model is missing there, or documented there but gone from the model."""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from ingest.config import DynamoDBSource, MySQLSource, PostgresSource, SourcesConfig

SOURCE = "sources.<name>"
KINDS = (("mysql", MySQLSource), ("postgres", PostgresSource), ("dynamodb", DynamoDBSource))


@dataclass(frozen=True)
class Key:
    path: str
    """Dotted, as written in the file: `sources.<name>.snapshot.chunk_size`."""
    kinds: tuple[str, ...]
    """The source kinds that have it (none: a top-level key)."""
    type: str
    default: str
    meaning: str


def _unwrap(annotation: Any) -> Any:
    """The type inside Annotated[...] (pure)."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _optional(annotation: Any) -> tuple[Any, bool]:
    """(the type, whether None is allowed) of `X | None` (pure)."""
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0]), True
    return annotation, False


def type_name(annotation: Any) -> str:
    """A field's type in the words of a YAML file (pure)."""
    inner, optional = _optional(annotation)
    origin = typing.get_origin(inner)
    if origin is typing.Literal:
        name = " or ".join(f'"{v}"' for v in typing.get_args(inner))
    elif origin is list:
        name = f"list of {type_name(typing.get_args(inner)[0])}s"
    elif origin is dict:
        name = "mapping"
    else:
        name = {int: "integer", float: "number", bool: "boolean", str: "string", Path: "path"}.get(inner, str(inner))
    return f"{name} or null" if optional else name


def _default(field) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if value is PydanticUndefined:
        return "-"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) and value >= 10_000:
        return f"{value:_}"
    return str(value) if isinstance(value, (Path, str)) else repr(value)


def _meaning(field) -> str:
    """The first paragraph of the field's docstring, on one line (pure)."""
    text = (field.description or "").split("\n\n")[0]
    return re.sub(r"\s+", " ", text).strip()


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """(the settings model a field holds, the path part between: "" or ".<table>") (pure)."""
    inner, _ = _optional(annotation)
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return inner, ""
    if typing.get_origin(inner) is dict:
        value = _unwrap(typing.get_args(inner)[1])
        if isinstance(value, type) and issubclass(value, BaseModel):
            return value, ".<table>"
    return None, ""


def walk(model: type[BaseModel], prefix: str, kinds: tuple[str, ...]) -> list[Key]:
    """The leaf keys under `model`, their paths starting with `prefix`."""
    out = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        path = f"{prefix}.{field.alias or name}" if prefix else field.alias or name
        nested, between = _model_of(field.annotation)
        if nested is not None:
            out += walk(nested, path + between, kinds)
        else:
            out.append(Key(path, kinds, type_name(field.annotation), _default(field), _meaning(field)))
    return out


def keys() -> list[Key]:
    """Every key of the sources file: the top level's, then each source kind's (one row for a key that
    every kind holding it documents alike)."""
    top = [k for k in walk(SourcesConfig, "", ()) if k.path != "sources"]
    merged: dict[tuple, list[str]] = {}
    for kind, model in KINDS:
        for k in walk(model, SOURCE, (kind,)):
            merged.setdefault((k.path, k.type, k.default, k.meaning), []).append(kind)
    return top + [Key(path, tuple(kinds), kind_type, default, meaning)
                  for (path, kind_type, default, meaning), kinds in merged.items()]


def markdown() -> str:
    """docs/configuration.md's tables (pure)."""
    def table(rows: list[Key], with_kinds: bool) -> str:
        head = "| key | " + ("kinds | " if with_kinds else "") + "type | default | meaning |\n"
        head += "|---|" + ("---|" if with_kinds else "") + "---|---|---|\n"
        return head + "".join(
            f"| `{k.path}` | " + (f"{', '.join(k.kinds)} | " if with_kinds else "")
            + f"{k.type} | {k.default} | {k.meaning.replace('|', '/')} |\n" for k in rows)

    every = keys()
    return ("### Top level\n\n" + table([k for k in every if not k.kinds], False)
            + "\n### Sources\n\n" + table([k for k in every if k.kinds], True))


def documented(text: str) -> set[str]:
    """The keys a Markdown text documents: the first cell of each table row, in backticks (pure)."""
    return set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.M))


if __name__ == "__main__":
    print(markdown(), end="")
