"""What a buffer is doing, for people: one summary shared by `dacctl status` and Slurm's
`scontrol show bbstat <job>`, so both always say the same thing."""

from __future__ import annotations

from daccore.escape import printable
from daccore.records.buffer_doc import failed
from daccore.units import format_duration, format_size

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from collections.abc import Mapping

    from daccore.records.buffer_doc import Doc
    from daccore.records.models import Buffer, Status

__all__ = ["view", "summary_line", "staged_text", "stages_text"]


def view(buf: Buffer, statuses: Mapping[str, Status | None]) -> Doc:
    """A plain dict (the --json form), from the model (`daccore.records.buffer_doc.status_view`,
    which the JSON readers use, is the one place of its shape)."""
    from daccore.records.buffer_doc import status_view

    return status_view(
        buf.model_dump(mode="json"),
        {h: s.model_dump(mode="json") for h, s in statuses.items() if s},
    )


def summary_line(v: Doc) -> str:
    """e.g. `buffer 7: staged_in -> mounted, stage_in, staged 12.0MiB/40.0MiB 30% 120/400 files
    at 20.0MiB/s, 1s left`; `, failed: <the first host's error>` when the buffer failed
    (`daccore.records.buffer_doc.failed`). A view without generations (from a user service
    before them) counts every error, as that service did."""
    states = sorted({h["state"] or "new" for h in v["hosts"]})
    line = f"buffer {v['buffer']}: {','.join(states)}"
    if states != [v["desired_state"]]:
        line += f" -> {v['desired_state']}"
    steps = sorted({h["step"].split(":")[0] for h in v["hosts"] if h["step"]})
    if steps:
        line += f", {','.join(steps)}"
    progress = [h["progress"] for h in v["hosts"] if h["progress"]]
    if progress:
        line += ", staged " + staged_text(progress)
    # a failure the spec's newer generation is retrying is not one (buffer_doc.failed)
    errors = [h["error"]["message"] for h in v["hosts"] if failed(h, v.get("generation", 0))]
    if errors:
        line += f", failed: {errors[0]}"
    return printable(line)  # Slurm prints it to whoever ran scontrol show bbstat


def staged_text(progress: list[Doc]) -> str:
    """Bytes and files done of the total, the rate and the time left, summed over hosts (only
    the primary stages): `12.0MiB/40.0MiB 30% 120/400 files at 20.0MiB/s, 1s left`. While the
    copier still walks the tree the totals only grow: `counting` stands for the percentage and
    the time left (a share of a total not yet known would mislead: 100 % of the first file)."""
    done = sum(p["bytes_done"] for p in progress)
    total = sum(p["bytes_total"] for p in progress)
    counting = any(p.get("counting") for p in progress)
    share = "" if counting else f" {100 * done // total if total else 100}%"
    text = (
        f"{format_size(done)}/{format_size(total)}{share} "
        f"{sum(p['files_done'] for p in progress)}/{sum(p['files_total'] for p in progress)}"
        " files"
    )
    rate = sum(p.get("rate", 0) for p in progress)
    if rate:
        text += f" at {format_size(rate)}/s"
    if counting:
        text += ", counting"
    elif done < total and all(p.get("eta") is not None for p in progress):
        text += f", {format_duration(max(p['eta'] for p in progress))} left"
    return text


def stages_text(stages: list[tuple[Doc, Doc | None]], errors: bool = True) -> str:
    """The stages a job asked for while it ran (daccore.store.injob's JSON pairs: request,
    status), for bbstat's line: `in-job stages: 3 done, 1 running (410MiB/1GiB 40% 0/1
    files at 200MiB/s, 3s left), 1 failed: stage out failed: /d: Permission denied`;
    `errors` False leaves the failures' text out (it names the owner's paths). '' for none."""
    if not stages:
        return ""
    counts: dict[str, int] = {}
    running, failed = [], []
    for _, status in stages:
        state = (status or {}).get("state") or "queued"
        counts[state] = counts.get(state, 0) + 1
        if state == "running" and (status or {}).get("progress"):
            running.append(status["progress"])  # type: ignore[index]
        if state == "failed" and (status or {}).get("error"):
            failed.append(status["error"]["message"])  # type: ignore[index]
    order = ("done", "running", "queued", "failed", "cancelled", "revoked")
    parts = []
    for state in order:
        if counts.get(state):
            part = f"{counts[state]} {state}"
            if state == "running" and running:
                part += f" ({staged_text(running)})"
            if state == "failed" and failed and errors:
                part += f": {failed[0]}"
            parts.append(part)
    return printable("in-job stages: " + ", ".join(parts))
