"""What a buffer is doing, for people: one summary shared by `dacctl status` and Slurm's
`scontrol show bbstat <job>`, so both always say the same thing."""

from __future__ import annotations

from daccore.units import format_size

__all__ = ["view", "summary_line"]


def view(buf, statuses: dict) -> dict:
    """A plain dict (the --json form): the spec's desired state and, per host, what it reached,
    the running step, staging progress and any error."""
    hosts = []
    for host in buf.allocation.hosts:
        s = statuses.get(host)
        p = s.progress if s else None
        hosts.append({
            "host": host,
            "state": s.state.value if s and s.state else None,
            "step": s.step if s else "",
            "progress": p.model_dump() if p else None,
            "error": s.error.model_dump(mode="json") if s and s.error else None,
        })
    return {"buffer": buf.name, "job": buf.job_id, "owner": buf.owner_uid,
            "persistent": buf.persistent, "desired_state": buf.desired_state.value,
            "size": buf.allocation.size, "hosts": hosts}


def summary_line(v: dict) -> str:
    """e.g. `buffer 7: staged_in -> mounted, stage_in 12.0MiB/40.0MiB 30% 120/400 files`."""
    states = sorted({h["state"] or "new" for h in v["hosts"]})
    line = f"buffer {v['buffer']}: {','.join(states)}"
    if states != [v["desired_state"]]:
        line += f" -> {v['desired_state']}"
    steps = sorted({h["step"].split(":")[0] for h in v["hosts"] if h["step"]})
    if steps:
        line += f", {','.join(steps)}"
    done = total = files = files_total = 0
    for h in v["hosts"]:
        if h["progress"]:
            done += h["progress"]["bytes_done"]
            total += h["progress"]["bytes_total"]
            files += h["progress"]["files_done"]
            files_total += h["progress"]["files_total"]
    if total or files_total:
        pct = 100 * done // total if total else 100
        line += (f", staged {format_size(done)}/{format_size(total)} {pct}% "
                 f"{files}/{files_total} files")
    errors = [h["error"]["message"] for h in v["hosts"] if h["error"]]
    if errors:
        line += f", failed: {errors[0]}"
    return line
