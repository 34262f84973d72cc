"""A buffer's spec and statuses as etcd holds them (JSON): what Slurm's hooks and dac-bbstat
read without pydantic (which costs them ~0.2 s, docs/performance.md). Every value they derive
from a spec is computed here, once; `daccore.records.models` derives the same from the model, and
tests/unit/daccore/test_buffer_doc.py ties the two, so neither can drift. Whether a buffer
failed and its one-word state are decided here too, for every view, the model-based ones
included. Standard library only."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    #: a JSON object as etcd holds it (a spec, a status, a progress): its shape is the model's
    Doc = dict[str, Any]

__all__ = ["hosts", "size", "failed", "state", "STATES", "status_view"]


def hosts(doc: Doc) -> list[str]:
    """The storage hosts holding its bricks (`Allocation.hosts`)."""
    return sorted({b["host"] for b in doc["allocation"]["bricks"]})


def size(doc: Doc) -> int:
    """Its bytes, the bricks' capacities summed (`Allocation.size`)."""
    return sum(b["capacity"] for b in doc["allocation"]["bricks"])


def failed(status: Doc | None, generation: int) -> bool:
    """Whether a host's status (or a host of `status_view`) says the buffer failed: it holds
    an error answering the spec's current `generation`. The one rule of every view and
    Slurm call (`dacctl status`, `buffers`, `show`, bbstat, dwstat's F, jobs' waits and
    retries).

    Why the current generation only: a status answers one generation of the spec
    (`Status.generation`), and every change of the spec bumps it. A host's dacd stops after a
    failure only until the spec changes (daccore.records.lifecycle.next_step), so an error
    under an older generation is one being retried (a stage asked for again, a teardown
    after a failed stage, an attachment changed) or outgrown: it stays in the status until
    that host runs a step again, and forever when the new spec needs none there. Counting it
    would call failed a buffer dacd is already rebuilding, or one that works. A status
    without a generation (a view from before it had one) answers 0."""
    return (
        status is not None
        and bool(status.get("error"))
        and status.get("generation", 0) >= generation
    )


#: Every value `state` can return: before any host reports, the lifecycle, a failure.
STATES = ("new", "created", "staged_in", "mounted", "unmounted", "staged_out", "deleted", "error")


def state(hosts: list[str], statuses: Mapping[str, Doc], generation: int) -> str:
    """One word for a buffer across its `hosts` (`statuses`: host -> status): "error" when
    one `failed` at the spec's `generation`, else "new" while one has reached no state yet,
    else the lowest state they reached."""
    from daccore.records.states import State

    if any(failed(statuses.get(h), generation) for h in hosts):
        return "error"
    reached = [(statuses.get(h) or {}).get("state") for h in hosts]
    if not all(reached):
        return "new"
    return min((State(s) for s in reached), key=lambda s: s.rank).value


def status_view(doc: Doc, statuses: dict[str, Doc]) -> Doc:
    """The buffer's status as `dacctl status --json` prints it: the spec's desired state and,
    per host, what it reached, the running step, staging progress and any error with the
    generation it answers, so `failed` reads the view as it reads the statuses; `state` is
    the buffer's one word. `statuses`: host -> status document."""
    per_host = []
    for host in hosts(doc):
        s = statuses.get(host) or {}
        per_host.append(
            {
                "host": host,
                "state": s.get("state"),
                "step": s.get("step") or "",
                "progress": s.get("progress"),
                "error": s.get("error"),
                "generation": s.get("generation", 0),
            }
        )
    return {
        "buffer": doc["name"],
        "job": doc.get("job_id"),
        "owner": doc.get("owner_uid"),
        "persistent": bool(doc.get("persistent")),
        "desired_state": doc["desired_state"],
        "generation": doc["generation"],
        "state": state(hosts(doc), statuses, doc["generation"]),
        "size": size(doc),
        "hosts": per_host,
    }
