"""The Python API of stages from inside a running job (issue 36): what `dacctl stage` and a
Python program call, on one of the job's nodes.

    from daccore.services import stage_client as dw

    s = dw.stage_out(os.environ["DW_JOB_STRIPED"] + "/ckpt.3", "/home/me/ckpt.3")
    ...                                   # compute on while it drains
    dw.wait([s["id"]])                    # or dw.status(s["id"]), dw.cancel(s["id"])
    dw.stage_out(".../ckpt.4", "/home/me/ckpt", at_job_end=True, revocable=True)

Each call is one request to dac's user service (daccore.services.user_client.ask: a munge
credential, one JSON line back), for the job and node Slurm names in the environment
(SLURM_JOB_ID, SLURMD_NODENAME); the service checks both (daccore.services.injob). A stage
is a dict: id, state (queued, running, done, failed, cancelled, revoked), bytes and files
done and in total, rate, eta, error; `stage_*` return at once, with the stage queued. A
refusal is raised as the DacError of its kind (UserError: a path, a job not yours; AdminError:
the service or munged unreachable), with its one line.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from daccore.errors import UserError

if TYPE_CHECKING:
    from daccore.settings.cache import Json

__all__ = ["stage_in", "stage_out", "list_stages", "status", "wait", "cancel", "FINAL"]

#: the states a stage ends in
FINAL = ("done", "failed", "cancelled", "revoked")


def _job() -> tuple[str, str]:
    job = os.environ.get("SLURM_JOB_ID", "")
    node = os.environ.get("SLURMD_NODENAME", "")
    if not job or not node:
        raise UserError(
            "stage: run inside a job (SLURM_JOB_ID and SLURMD_NODENAME are not set here)"
        )
    return job, node


def _ask(verb: str, config: Any = None, **args: Any) -> Json:
    from daccore.services.user_client import ask
    from daccore.settings.config import load_config

    return ask(config or load_config(), verb, args, timeout=60)


def _start(direction: str, source: str, destination: str, **flags: Any) -> Json:
    job, node = _job()
    source, destination = os.path.abspath(source), os.path.abspath(destination)
    directory = flags.pop("directory")
    if directory is None:  # the source as this node sees it: a directory, or a file
        directory = os.path.isdir(source) and not os.path.islink(source)
    return _ask(
        "stage-start",
        flags.pop("config"),
        job=job,
        node=node,
        direction=direction,
        type="directory" if directory else "file",
        source=source,
        destination=destination,
        when="at_job_end" if flags["at_job_end"] else "now",
        revocable=flags["revocable"],
    )


def stage_in(
    source: str,
    destination: str,
    *,
    directory: bool | None = None,
    at_job_end: bool = False,
    revocable: bool = False,
    config: Any = None,
) -> Json:
    """Copy `source` (yours) into the job's buffer at `destination`, in the background."""
    return _start(
        "in",
        source,
        destination,
        directory=directory,
        at_job_end=at_job_end,
        revocable=revocable,
        config=config,
    )


def stage_out(
    source: str,
    destination: str,
    *,
    directory: bool | None = None,
    at_job_end: bool = False,
    revocable: bool = False,
    config: Any = None,
) -> Json:
    """Copy `source` (in the job's buffer) to `destination` (yours): now, in the background,
    or with `at_job_end` after the job's #DW stage_out lines; with `revocable` a later
    at-job-end stage to the same destination takes its place."""
    return _start(
        "out",
        source,
        destination,
        directory=directory,
        at_job_end=at_job_end,
        revocable=revocable,
        config=config,
    )


def list_stages(config: Any = None) -> list[Json]:
    return list(_ask("stage-list", config, job=_job()[0])["stages"])


def status(id: int, config: Any = None) -> Json:
    return _ask("stage-status", config, job=_job()[0], id=id)


def cancel(id: int, config: Any = None) -> Json:
    return _ask("stage-cancel", config, job=_job()[0], id=id)


def wait(
    ids: list[int] | None = None, timeout: float | None = None, config: Any = None
) -> list[Json]:
    """The stages `ids` (every one of the job's when None) once each has ended, or as they
    are when `timeout` seconds have passed (None: no limit)."""
    job = _job()[0]
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = 30 if deadline is None else max(0, min(30, int(deadline - time.monotonic())))
        got = _ask("stage-wait", config, job=job, ids=ids, timeout=left)
        if got["done"] or (deadline is not None and time.monotonic() >= deadline):
            return list(got["stages"])
