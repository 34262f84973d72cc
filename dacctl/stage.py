"""`dacctl stage …`: stages from inside a running job (declared in dacctl/commands.py), over
the Python API (daccore.services.stage_client); each prints the stage or stages, one line
each, or their JSON."""

from __future__ import annotations

import json

from daccore.errors import UserError
from daccore.escape import printable
from daccore.units import format_size

TYPE_CHECKING = False  # typing's own, without importing typing on a command's path; mypy: True
if TYPE_CHECKING:
    from daccore.settings.cache import Json

_HEAD = "ID  STATE      WHEN        DIR  DONE                 RATE       SOURCE -> DESTINATION"


def _line(s: Json) -> str:
    done = f"{format_size(s['bytes_done'])}/{format_size(s['bytes_total'])}"
    rate = f"{format_size(s['rate'])}/s" if s["rate"] else "-"
    eta = f" eta {s['eta']:.0f}s" if s.get("eta") and s["state"] == "running" else ""
    error = f": {s['error']}" if s.get("error") else ""
    when = s["when"] + ("*" if s["revocable"] else "")
    return printable(
        f"{s['id']:<3} {s['state']:<10} {when:<11} {s['direction']:<4} {done:<20} {rate:<10} "
        f"{s['source']} -> {s['destination']}{eta}{error}"
    )


def _print(stages: list[Json], as_json: bool, head: bool = True) -> None:
    if as_json:
        print(json.dumps(stages if head else stages[0], indent=2))
        return
    if head:
        print(_HEAD)
    for s in stages:
        print(_line(s))


def _start(
    direction: str,
    source: str,
    destination: str,
    directory: bool,
    at_job_end: bool,
    revocable: bool,
    as_json: bool,
) -> None:
    from daccore.services import stage_client

    call = stage_client.stage_in if direction == "in" else stage_client.stage_out
    s = call(
        source,
        destination,
        directory=directory or None,
        at_job_end=at_job_end,
        revocable=revocable,
    )
    if as_json:
        print(json.dumps(s, indent=2))
    else:
        print(f"stage {s['id']}: {s['state']}")


def stage_in(
    source: str,
    destination: str,
    directory: bool,
    at_job_end: bool,
    revocable: bool,
    as_json: bool,
) -> None:
    _start("in", source, destination, directory, at_job_end, revocable, as_json)


def stage_out(
    source: str,
    destination: str,
    directory: bool,
    at_job_end: bool,
    revocable: bool,
    as_json: bool,
) -> None:
    _start("out", source, destination, directory, at_job_end, revocable, as_json)


def stage_list(as_json: bool) -> None:
    from daccore.services import stage_client

    _print(stage_client.list_stages(), as_json)


def stage_status(id: int, as_json: bool) -> None:
    from daccore.services import stage_client

    _print([stage_client.status(id)], as_json, head=False)


def stage_cancel(id: int, as_json: bool) -> None:
    from daccore.services import stage_client

    _print([stage_client.cancel(id)], as_json, head=False)


def stage_wait(ids: list[int], all_: bool, timeout: float | None, as_json: bool) -> None:
    """Until the stages have ended; a failed one is this command's failure (exit 1)."""
    from daccore.services import stage_client

    if bool(ids) == all_:
        raise UserError("stage wait: give stage ids or --all")
    stages = stage_client.wait(ids or None, timeout)
    _print(stages, as_json)
    failed = [s for s in stages if s["state"] == "failed"]
    if failed:
        raise UserError(f"stage {failed[0]['id']} failed: {failed[0]['error']}")
    if not all(s["state"] in stage_client.FINAL for s in stages):
        raise UserError(f"stage wait: not all ended within {timeout:g} s")
