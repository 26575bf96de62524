"""Row filters: which changes of a filtered table land, and as what (pure).

A table's filter is a predicate in the source's own SQL (`tables.where.<table>`). The snapshot reads
only the rows it holds for; a change batch asks the same server to evaluate it on the images the log
decoded (so both paths have the source's semantics: its collations, its functions, its types), then
keeps what silver needs to hold exactly the filtered rows:

| change | before image | after image | lands as |
|---|---|---|---|
| insert | | in | the insert |
| insert | | out | nothing |
| update | in or unknown | in | the update |
| update | out | in | an insert (the row moved into the filter) |
| update | in or unknown | out | a delete of the row as it was (it moved out); unknown: of its key |
| update | out | out | nothing |
| delete | in or unknown | | the delete |
| delete | out | | nothing |

"Unknown" is an image a source did not log (an update without its old row, a delete with its key alone):
the change lands as if the row had been inside, which silver's ordered merge makes right (a delete of a
key silver never held leaves a tombstone of that key, no other value). MySQL's full row images and
PostgreSQL's REPLICA IDENTITY FULL, which a filtered table needs, leave nothing unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ingest.changes import ChangeOp, ChangeRecord

Image = dict[str, Any]


@dataclass(frozen=True)
class RowFilter:
    """A table's row filter: `where`, a predicate in the source's SQL over the table's source columns."""

    table: str
    where: str

    def shape(self) -> str:
        """What a snapshot's waves were read under (a snapshot never resumes across a change of it)."""
        return f";where:{self.where}"


def predicate(where: str) -> str:
    """A filter's predicate as a part of a WHERE clause: on lines of its own, so that a `-- comment` in it
    ends there, and in parentheses, so that its OR binds inside."""
    return f"(\n{where}\n)"


def filter_changes(records: Sequence[ChangeRecord], inside: Callable[[list[Image]], list[bool | None]],
                   keys: Sequence[str]) -> list[ChangeRecord]:
    """The records that land for a filtered table (see the module's table). `inside` evaluates the filter
    on a list of images in one call: True, False, or None for an image it cannot judge."""
    images: list[Image] = []
    slots: list[tuple[int | None, int | None]] = []  # per record: (before's index, after's index)

    def ask(image: Image | None) -> int | None:
        if image is None:
            return None
        images.append(image)
        return len(images) - 1

    for r in records:
        if r.op is ChangeOp.INSERT:
            slots.append((None, ask(r.row)))
        elif r.op is ChangeOp.UPDATE:
            slots.append((ask(r.before), ask(r.row)))
        elif r.op is ChangeOp.DELETE:
            slots.append((ask(r.row), None))
        else:
            slots.append((None, None))
    verdicts = inside(images) if images else []
    if len(verdicts) != len(images):
        raise ValueError(f"the filter judged {len(verdicts)} images of {len(images)}")

    def verdict(index: int | None) -> bool | None:
        return None if index is None else verdicts[index]

    landed = (land(r, verdict(b), verdict(a), keys) for r, (b, a) in zip(records, slots))
    return [r for r in landed if r is not None]


def land(r: ChangeRecord, before: bool | None, after: bool | None, keys: Sequence[str]) -> ChangeRecord | None:
    """What one change lands as, given whether its images are inside the filter (None: not known; see the
    module's table), or None for nothing."""
    if r.op is ChangeOp.INSERT:
        return r if after is not False else None
    if r.op is ChangeOp.UPDATE:
        if after is not False:
            return r if before is not False else replace(r, op=ChangeOp.INSERT, before=None)
        if before is not False:
            gone = r.before if r.before is not None else {k: r.row.get(k) for k in keys}
            return replace(r, op=ChangeOp.DELETE, row=gone, before=None)
        return None
    if r.op is ChangeOp.DELETE:
        return r if before is not False else None
    return r
