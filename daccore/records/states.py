"""A buffer's lifecycle states, in order. Standard library only: the Slurm functions walk them
on plain JSON records without importing pydantic (docs/performance.md); `daccore.records.models`
uses the same enum for its records."""

from __future__ import annotations

from enum import Enum

__all__ = ["State"]


class State(str, Enum):
    """A buffer's lifecycle, in order. Teardown may jump to DELETED from anywhere."""

    CREATED = "created"
    STAGED_IN = "staged_in"
    MOUNTED = "mounted"
    UNMOUNTED = "unmounted"
    STAGED_OUT = "staged_out"
    DELETED = "deleted"

    @property
    def rank(self) -> int:
        return _ORDER.index(self)

    def next(self) -> State | None:
        """The state after this one, or None after DELETED."""
        i = self.rank + 1
        return _ORDER[i] if i < len(_ORDER) else None


_ORDER = list(State)
