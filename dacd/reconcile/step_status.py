"""What a step writes in the statuses of its hosts while it runs and when it ends.

The fields a step changes as it goes (what is mounted on compute nodes, the staging progress,
a split stage's shares done here) are attributes the step sets; each write takes them as they
are then. The step's start and outcome are written with `write`, which raises (a lapsed lease
must stop the step: Fenced); a progress line with `line`, shown when etcd takes it: one etcd
would not take (out of reach past etcd.timeout, restarting) must not fail a step that is going
well.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from daccore.errors import StoreUnavailable
from daccore.records.models import Buffer, Progress, ShareReport, State, Status
from daccore.rules.trust import Untrusted

if TYPE_CHECKING:
    from daccore.store import Store

log = logging.getLogger("dacd.reconciler")  # the reconciler's lines, whichever part says them

__all__ = ["StepStatus", "STAGE_STEPS"]

STAGE_STEPS = ("stage_in", "stage_out")


class StepStatus:
    """The statuses `step` of `buf` writes on each of `hosts`, of this incarnation of the
    buffer only (Superseded otherwise); `mine` is this host's status before the step, and
    `statuses(name)` reads the buffer's statuses, checked (dacd/reconcile/refusals.py)."""

    def __init__(
        self,
        store: Store,
        host: str,
        buf: Buffer,
        step: str,
        hosts: list[str],
        incarnation: int,
        mine: Status | None,
        statuses: Callable[[str], dict[str, Status]],
    ) -> None:
        self._store, self._host, self._buf, self._step = store, host, buf, step
        self._hosts, self._incarnation, self._statuses = hosts, incarnation, statuses
        self.reached: State | None = mine.state if mine else None
        self.attached: dict[str, list[str]] = mine.attached if mine else {}
        self.attempt = (mine.attempt + 1) if mine and mine.step == step else 1
        #: the last staging progress stays shown
        self.progress: Progress | None = mine.progress if mine else None
        self.share: ShareReport | None = mine.share if mine else None  # shares done here
        #: a stage of a lustre or daos buffer on several servers: the other hosts' progress
        #: and share reports are their own dacds' (a split stage's shares, issue 35), so this
        #: primary's progress lines go to its own status alone, and its outcome keeps theirs
        self._apart = step in STAGE_STEPS and len(hosts) > 1
        if step in STAGE_STEPS and host != buf.allocation.primary_host:
            self.progress = None  # what a share copies here now is shown, not the last stage's

    def write(self, **fields: Any) -> None:
        """The step's fields as they are now, with `fields` over them, in every host's status."""
        values = self._values(fields)
        if self._apart:
            self._write_apart(values)
        else:
            self._write_all(values)

    def line(self, **fields: Any) -> None:
        """A progress line (the task running, bytes staged): shown when etcd takes it. The
        step's outcome is written with write(), which raises, and a lapsed lease still stops
        the step (Fenced)."""
        try:
            values = self._values(fields)
            if self._apart:
                self._store.put_status(Status(host=self._host, **values), self._incarnation)
            else:
                self._write_all(values)
        except StoreUnavailable as e:
            log.warning("buffer %s: %s progress not shown (%s)", self._buf.name, self._step, e)

    def on_task(self, task: str) -> None:
        self.line(step=f"{self._step}: {task}")

    def on_progress(self, progress: dict[str, Any]) -> None:
        self.progress = Progress(**progress)
        self.line()

    def on_share(self, report: ShareReport) -> None:
        self.share = report
        self.line()

    def _values(self, fields: dict[str, Any]) -> dict[str, Any]:
        return {
            "buffer": self._buf.name,
            "state": self.reached,
            "generation": self._buf.generation,
            "step": self._step,
            "attached": self.attached,
            "attempt": self.attempt,
            "progress": self.progress,
            "updated_at": time.time(),
            "share": self.share,
            **fields,
        }

    def _write_all(self, values: dict[str, Any]) -> None:
        if len(self._hosts) == 1:
            self._store.put_status(Status(host=self._hosts[0], **values), self._incarnation)
        else:
            self._store.put_statuses(
                [Status(host=host, **values) for host in self._hosts], self._incarnation
            )

    def _write_apart(self, values: dict[str, Any]) -> None:
        """This host's status as it is, the others' with their own progress and share."""
        try:
            theirs = self._statuses(self._buf.name)
        except Untrusted:  # this host's own is bad: the outcome is written over it
            theirs = {}
        self._store.put_statuses(
            [Status(host=self._host, **values)]
            + [
                Status(
                    host=host,
                    **{
                        **values,
                        "progress": theirs[host].progress if host in theirs else None,
                        "share": theirs[host].share if host in theirs else None,
                    },
                )
                for host in self._hosts
                if host != self._host
            ],
            self._incarnation,
        )
