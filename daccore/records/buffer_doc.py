"""A buffer's spec and statuses as etcd holds them (JSON): what Slurm's hooks and dac-bbstat
read without pydantic (which costs them ~0.2 s, docs/performance.md). Every value they derive
from a spec is computed here, once; `daccore.records.models` derives the same from the model, and
tests/unit/daccore/test_buffer_doc.py ties the two, so neither can drift. Standard library
only."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Any

    #: a JSON object as etcd holds it (a spec, a status, a progress): its shape is the model's
    Doc = dict[str, Any]

__all__ = ["hosts", "size", "status_view"]


def hosts(doc: Doc) -> list[str]:
    """The storage hosts holding its bricks (`Allocation.hosts`)."""
    return sorted({b["host"] for b in doc["allocation"]["bricks"]})


def size(doc: Doc) -> int:
    """Its bytes, the bricks' capacities summed (`Allocation.size`)."""
    return sum(b["capacity"] for b in doc["allocation"]["bricks"])


def status_view(doc: Doc, statuses: dict[str, Doc]) -> Doc:
    """The buffer's status as `dacctl status --json` prints it: the spec's desired state and,
    per host, what it reached, the running step, staging progress and any error. `statuses`:
    host -> status document."""
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
            }
        )
    return {
        "buffer": doc["name"],
        "job": doc.get("job_id"),
        "owner": doc.get("owner_uid"),
        "persistent": bool(doc.get("persistent")),
        "desired_state": doc["desired_state"],
        "size": size(doc),
        "hosts": per_host,
    }
