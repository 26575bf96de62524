"""What a preflight check finds about a source, for any kind: a level, the thing, and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True)
class Finding:
    level: str
    subject: str
    """What it is about: `source shop`, `shop.orders`, `shop.orders.location`."""
    message: str

    def line(self) -> str:
        return f"{self.level:4}  {self.subject}: {self.message}"


def failed(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == FAIL]
