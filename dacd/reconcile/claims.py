"""The buffers this host's claims give its dacd, kept from the listing and the claims' watches.

A claim on one of this host's bricks makes its buffer held (this dacd acts on it), or passive
in a "together" pool (lustre, daos: daccore.backends) when the claim names another primary:
that primary runs every step for all the buffer's hosts, so this dacd never reads the spec at
a change; only a split stage's plan naming it wakes it (issue 35). A work key that comes before
its claim's event (two watches, no order between them) is remembered, and the buffer looked at
when the claim comes. The spec revision last acted on of each held buffer is kept beside them,
for the resync to compare.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from daccore.backends import runs_once_for_all_hosts

if TYPE_CHECKING:
    from daccore.settings.config import DacConfig
    from daccore.store import Store
    from daccore.store.base import Change

__all__ = ["Claims", "EARLY_MAX"]

#: early wake-ups kept at most: a work key of a buffer never claimed here is a stray
EARLY_MAX = 4096

#: what a claim says: (buffer name, its primary host, or None when the claim does not say)
Claim = tuple[str, str | None]


class Claims:
    """This host's claims and what they give it (see the module's docstring), under a lock of
    their own: the watches' threads change them, the workers and the resync read them."""

    def __init__(self, store: Store, config: DacConfig, host: str) -> None:
        self._store, self._host = store, host
        #: the pools this host has bricks in
        self.pools = (
            sorted({b.pool for b in config.hosts[host].bricks}) if host in config.hosts else []
        )
        #: pools whose backend runs each step once, on the buffer's primary, for all its hosts
        self.together = {
            p for p in self.pools if runs_once_for_all_hosts(config.pools[p].backend.value)
        }
        self._lock = threading.Lock()
        self._claims: dict[str, str] = {}  # claim key -> buffer name, of the held ones
        self._held: dict[str, int] = {}  # buffer name -> claim keys it holds on this host
        self._passive: dict[str, str] = {}  # claim key -> buffer name
        self._early: set[str] = set()  # buffers woken before their claim's event came
        self._acted: dict[str, int] = {}  # buffer name -> the spec revision last reconciled

    def works_on(self, key: str, claim: Claim) -> str | None:
        """The buffer a claim on this host's brick gives this dacd work on: none when the
        pool's steps run on the buffer's primary for all hosts and the claim names another
        primary (a 2,048-brick lustre buffer is 1,000 hosts' claims: 999 dacds would read
        its 160 KB spec at every change only to leave it)."""
        name, primary = claim
        if (
            primary is not None
            and primary != self._host
            and self._store.keys.parse_claim(key)[0] in self.together
        ):
            return None
        return name

    def replace(self, found: dict[str, Claim | None]) -> tuple[set[str], set[str]]:
        """Every claim as a listing found it (None: a record that is no claim); the buffers
        held, and those only passive claims name."""
        claims = {
            key: name
            for key, claim in found.items()
            if claim is not None and (name := self.works_on(key, claim)) is not None
        }
        passive = {
            key: claim[0] for key, claim in found.items() if claim is not None and key not in claims
        }
        with self._lock:
            self._claims, self._held, self._passive = claims, {}, passive
            for name in claims.values():
                self._held[name] = self._held.get(name, 0) + 1
        return set(claims.values()), set(passive.values()) - set(claims.values())

    def apply(self, change: Change) -> set[str]:
        """A claim made or released (`name` the claim key, `record` the
        claim or None); the buffers to look at: one arriving, one leaving (its spec may be
        gone), one woken early."""
        with self._lock:
            self._passive.pop(change.name, None)
            old = self._claims.pop(change.name, None)
            if old is not None:
                self._held[old] -= 1
                if not self._held[old]:
                    del self._held[old]
            new = None if change.record is None else self.works_on(change.name, change.record)
            woken = None
            if change.record is not None:
                if change.record[0] in self._early:
                    self._early.discard(change.record[0])
                    woken = change.record[0]
            if new is not None:
                self._claims[change.name] = new
                self._held[new] = self._held.get(new, 0) + 1
            elif change.record is not None:
                self._passive[change.name] = change.record[0]
        return {n for n in (old, new, woken) if n is not None}

    def holds(self, name: str) -> bool:
        with self._lock:
            return name in self._held

    def passive_holds(self, name: str) -> bool:
        with self._lock:
            return name in self._passive.values()

    def woke_early(self, name: str) -> None:
        """`name` was woken before its claim's event came: looked at when it comes."""
        with self._lock:
            if len(self._early) < EARLY_MAX:
                self._early.add(name)

    def acted(self, name: str, revision: int | None) -> None:
        """A pass read `name`'s spec at `revision` (None: the spec is gone)."""
        with self._lock:
            if revision is None:
                self._acted.pop(name, None)
            else:
                self._acted[name] = revision

    def acted_on(self) -> tuple[list[str], dict[str, int]]:
        """The buffers held, and the spec revision last acted on of each (of those only: a
        buffer this host no longer holds is forgotten)."""
        with self._lock:
            held = sorted(self._held)
            self._acted = acted = {n: r for n, r in self._acted.items() if n in self._held}
        return held, acted
