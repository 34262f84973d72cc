"""The records dacd will not act on (daccore.rules.trust): nothing read from etcd is trusted.

A record that breaks a rule is logged once (one line naming its key and the rule; again only if
the reason changes) and skipped until it changes, and the host's status says so (category
admin) when the record names this host. Every part of the reconciler that reads a record logs
its refusals here, so that one record is one line whichever part met it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import TYPE_CHECKING

from daccore.errors import Kind
from daccore.records.bounds import BUFFER_NAME
from daccore.records.models import Buffer, Status, StatusError
from daccore.rules.trust import Untrusted, shown

if TYPE_CHECKING:
    from daccore.store import Store

log = logging.getLogger("dacd.reconciler")  # the reconciler's lines, whichever part says them

__all__ = ["Refusals"]


class Refusals:
    """The records refused, each with the reason last logged (see the module's docstring)."""

    def __init__(self, store: Store, host: str) -> None:
        self._store, self._host = store, host
        #: buffer name or status key -> (why it is skipped, the generation refused)
        self._last: dict[str, tuple[str, int]] = {}
        self._prefix = f"refused by {host}: "  # how a refusal's status message starts

    def log_once(self, key: str, why: str, generation: int = 0) -> bool:
        """Log `why` unless it was the last word on `key`; True when `key` is newly refused
        or refused at a new generation (a writer changed the record, still badly)."""
        last = self._last.get(key)
        if last is None or last[0] != why:
            log.error("skipping %s (until the record changes)", why)
        self._last[key] = (why, generation)
        return last != (why, generation)

    def forget(self, key: str) -> None:
        """`key` is gone or sane again: a new refusal of it is logged."""
        self._last.pop(key, None)

    def refuse(self, name: str, why: str, text: bytes | str | None, incarnation: int) -> None:
        """Log once and skip; tell the waiting Slurm call why, in this host's status, when
        the record (`text`: the spec) names this host under a sane buffer name. This host's
        own status, when that is what is bad, is left for an admin to look at."""
        generation = _generation(text) if text is not None else 0
        if (
            not self.log_once(name, why, generation)
            or text is None
            or not re.match(BUFFER_NAME, name)
            or self._host not in _named_hosts(text)
        ):
            return
        try:
            mine = self.statuses(name).get(self._host)
        except Untrusted:
            return
        fields = (
            mine.model_dump(exclude={"error", "generation", "updated_at"})
            if mine
            else {"buffer": name, "host": self._host}
        )
        self._store.put_status(
            Status(
                **fields,
                generation=generation,
                updated_at=time.time(),
                error=StatusError(category=Kind.ADMIN, message=f"{self._prefix}{why}"),
            ),
            incarnation,
        )

    def accepted(self, buf: Buffer, mine: Status | None, incarnation: int) -> Status | None:
        """The buffer's records are sane: its refusal forgotten, and this host's status
        (`mine`), if it says the spec was refused, carrying on where it was."""
        self.forget(buf.name)
        if mine and mine.error and mine.error.message.startswith(self._prefix):
            mine = mine.model_copy(update={"error": None, "generation": buf.generation})
            self._store.put_status(mine, incarnation)
        return mine

    def statuses(self, name: str) -> dict[str, Status]:
        """The buffer's statuses, each checked: another host's bad one counts as absent (it
        can only hold back the final reap), this host's own is Untrusted (its state decides
        whether to make a filesystem)."""
        out = {}
        for host, (key, text) in self._store.status_texts(name).items():
            try:
                status = Status.model_validate_json(text)
                if (status.buffer, status.host) != (name, host):
                    raise ValueError(f"names {shown(status.buffer)}/{shown(status.host)}")
            except ValueError as e:  # pydantic's ValidationError is one
                why = f"{key}: not a valid status: {shown(str(e).splitlines()[0], 120)}"
                if host == self._host:
                    raise Untrusted(why) from None
                self.log_once(key, why)
                continue
            out[host] = status
        return out


def _named_hosts(text: bytes | str) -> set[str]:
    """The hosts a refused record's allocation names, as far as it can be read."""
    try:
        bricks = json.loads(text)["allocation"]["bricks"]
        return {b["host"] for b in bricks if isinstance(b.get("host"), str)}
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return set()


def _generation(text: bytes | str) -> int:
    """A refused record's generation where it is a sane one (the Slurm side compares it)."""
    try:
        g = json.loads(text)["generation"]
    except (ValueError, TypeError, KeyError, RecursionError):
        return 0
    return g if type(g) is int and 0 <= g < 2**63 else 0
