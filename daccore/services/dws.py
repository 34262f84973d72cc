"""dac's buffers as Cray DataWarp's objects: each buffer is one DWS session, holding one
instance (its storage) and one configuration (its scratch file system); each job it is attached
to (`Buffer.attachments`) is one activation. dac numbers nothing, so every id is the buffer's
name (a job buffer's is its job id, which burst_buffer/datawarp also takes for the session's
token); an activation's is `<buffer>:<job>`.

One place for what a session is, shared by `dacctl --function show_sessions|show_instances|
show_configurations` (the JSON Slurm reads, e.g. at slurmctld's start) and `dac-bbstat`
(`scontrol show dwstat`'s tables). Standard library only, over specs and statuses as JSON: both
run in Slurm's time (docs/performance.md).
"""

from __future__ import annotations

import re

from daccore.records import buffer_doc
from daccore.records.bounds import BUFFER_NAME, JOB_KEY

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from daccore.records.buffer_doc import Doc

__all__ = ["Session", "sessions", "state_flags"]


class Session:
    """One buffer, as DWS saw a session with its instance, configuration and activations."""

    __slots__ = (
        "name",
        "owner",
        "created",
        "size",
        "type",
        "access",
        "persistent",
        "storage_hosts",
        "attachments",
        "state",
    )

    def __init__(self, name: str, doc: Doc, statuses: dict[str, Doc]):
        """ValueError (or KeyError, TypeError) for a spec that is no buffer's: Slurm takes
        these names for tokens, so only a buffer name stored under its own key is one."""
        request = doc["request"]
        if doc["name"] != name or not _BUFFER.fullmatch(name) or type(doc["owner_uid"]) is not int:
            raise ValueError(f"not a buffer's spec: {name!r}")
        self.name: str = name
        self.owner: int = doc["owner_uid"]
        self.created: int = int(doc.get("created_at") or 0)
        self.size: int = buffer_doc.size(doc)
        self.type: str = request.get("type", "scratch")
        self.access: str = request.get("access", "striped")
        self.persistent: bool = bool(doc.get("persistent"))
        self.storage_hosts: list[str] = buffer_doc.hosts(doc)
        #: job id -> the compute nodes that job has the buffer mounted on
        self.attachments: dict[str, list[str]] = {
            job: list(nodes)
            for job, nodes in (doc.get("attachments") or {}).items()
            if _JOB.fullmatch(job)
        }
        self.state = state_flags(
            doc.get("desired_state", ""),
            [statuses.get(h) or {} for h in self.storage_hosts],
            doc.get("generation", 1),  # the model's default, rather than leave the session out
        )

    @property
    def compute_nodes(self) -> list[str]:
        return sorted({n for nodes in self.attachments.values() for n in nodes})


def sessions(
    docs: dict[str, Doc], statuses: dict[str, dict[str, Doc]] | None = None
) -> list[Session]:
    """The sessions of `docs` (name -> spec, as `Store.buffer_docs`), by name; `statuses`:
    buffer -> host -> status, as `Store.all_status_docs` (none: every state unknown). A spec
    that is not a buffer's is left out, as every Slurm call leaves it (docs/security.md)."""
    statuses = statuses or {}
    found = []
    for name in sorted(docs):
        try:
            found.append(Session(name, docs[name], statuses.get(name) or {}))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return found


_BUFFER, _JOB = re.compile(BUFFER_NAME), re.compile(JOB_KEY)


def state_flags(desired: str, reached: list[Doc], generation: int) -> str:
    """DWS's five-character state, as dac fills it: `C` live or `D` being destroyed (teardown
    asked); `A` every storage host has made it; `F` the buffer failed (a host's error at the
    spec's `generation`, `buffer_doc.failed`); `T` being destroyed and not yet gone from every
    host; the fifth is always `-`. So `CA---` is a buffer in use, `D--T-` one in teardown."""
    destroying = desired == "deleted"
    made = bool(reached) and all(s.get("state") for s in reached)
    failed = any(buffer_doc.failed(s, generation) for s in reached)
    gone = bool(reached) and all(s.get("state") == "deleted" for s in reached)
    return (
        ("D" if destroying else "C")
        + ("A" if made and not destroying else "-")
        + ("F" if failed else "-")
        + ("T" if destroying and not gone else "-")
        + "-"
    )
