"""Cray's dw_wlm_cli protocol, answered: `answer()` turns the words of `dacctl --function <f> …`
into Slurm's answer, for the forked dacctl (dacctl/datawarp.py: burst_buffer/datawarp, and
burst_buffer.lua when the answerer cannot answer) and for the answerer
(dacservice/answerer/answers.py: the three hooks inside slurmctld). One contract, one code.

Only Slurm may call it: root or the config's slurm_user; anyone else is refused with one line
before any argument is read, and every argument is checked before use (slurm_args.py: job ids,
owners at or above min_owner_uid, files reached without following links through directories
only root or SlurmUser can change). The checked arguments are a SlurmCall
(slurm_functions.py), which the function's handler takes (slurm_functions.py, slurm_steps.py).
`scontrol show bbstat` never comes here (bbstat.py).

Success: exit 0, the function's output on stdout. Failure: exit 1 and one line on stdout, which
Slurm shows the user (sbatch's error, or the job's Reason). Never a traceback: unexpected errors
become one line too, with the traceback on stderr only under --debug.

How each function runs is its row's (command_table.py): `hot` (job_process, pools, paths) run
inside slurmctld under its locks, so they take the lean path: the cached config
(`daccore.settings.cache`), the standard-library `http` etcd transport with retries capped at
HOT_TIMEOUT seconds, and JSON reads; no pydantic, yaml or grpc is imported (bench/hot_path.py,
docs/performance.md). The others run in slurmscriptd with the same cached config and
transport, those that `rides_out` again while etcd is out of reach.
"""

from __future__ import annotations

import argparse
import os

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from collections.abc import Callable

    from daccore.services.command_table import Command, Usage
    from daccore.services.slurm_functions import CallFiles, SlurmCall
    from daccore.settings.cache import Json
    from daccore.store import Store

__all__ = ["answer", "settings_for_caller", "warm", "hot_timeout", "HOT_TIMEOUT"]

#: Longest a hook inside slurmctld waits for an unreachable etcd before failing.
HOT_TIMEOUT = 2.0


def hot_timeout() -> float:
    """HOT_TIMEOUT, or what burst_buffer.lua has left of it (DAC_HOT_TIMEOUT) when it forks
    dacctl after the answerer could not answer: slurmctld waits 2 s at most in all."""
    try:
        return min(HOT_TIMEOUT, max(0.1, float(os.environ["DAC_HOT_TIMEOUT"])))
    except (KeyError, ValueError):
        return HOT_TIMEOUT


class _Usage(Exception):
    """A function's arguments refused after parsing (`_need`): one line, exit 1."""


def answer(
    argv: list[str] | argparse.Namespace | Usage,
    settings: Json | None = None,
    store: Store | None = None,
    script: bytes | None = None,
    pathfile_reply: bool = False,
) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `dacctl --function argv`: the one place of every
    answer, for the forked command and for the warm answerer, which passes `settings`
    (settings_for_caller's, once it has checked its peer's credentials) and a `store` reading
    its in-memory mirror. Files this call opened are closed when it ends: the answerer lives
    on. `argv`: the words after `dacctl` (`--function NAME …`), or dacctl's parse of them (a
    Namespace, or the Usage that refused them), told only once the caller is known. `script`:
    the job script's bytes as the caller read them from --job's path (the answerer's peer,
    slurmctld: root or SlurmUser), for job_process, which then opens no file.
    `pathfile_reply`: paths answers the path file's lines on stdout and opens no file (its
    name still checked): the answerer's peer writes them into its own file."""
    from daccore.services.command_table import Exit, Usage
    from daccore.services.slurm_args import Refused
    from daccore.services.slurm_functions import CallFiles

    debug = (
        argv.debug
        if isinstance(argv, argparse.Namespace)
        else isinstance(argv, list) and "--debug" in argv
    )
    files = CallFiles()
    try:
        if settings is None:
            settings = settings_for_caller()
        row, args = _parsed(argv)
        call = _checked(row, args, settings, files, script, pathfile_reply)
        _need(row, args)
        out = _dispatch(row, call, settings, store)
        return 0, (out if not out or out.endswith("\n") else out + "\n"), ""
    except Usage as e:
        return 1, _one_line(f"dacctl: {e.message}") + "\n", ""
    except Exit:  # the answerer's words asked for --help: never Slurm's
        return 1, "dacctl: --help is for people, not one of Slurm's calls\n", ""
    except _Usage as e:
        return 1, _one_line(f"dacctl: {e}") + "\n", ""
    except Refused as e:
        return 1, _one_line(str(e)) + "\n", ""
    except Exception as e:  # noqa: BLE001 - the one place every error becomes one line
        from daccore.errors import DacError

        err = ""
        if debug:
            import traceback

            err = traceback.format_exc()
        if isinstance(e, DacError):
            return 1, _one_line(str(e)) + "\n", err
        line = f"dac internal error: {type(e).__name__}: {e} (rerun with --debug)"
        return 1, _one_line(line) + "\n", err
    finally:
        if store is not None:  # a forked call leaves them to the process's exit
            files.close()


def _parsed(argv: list[str] | argparse.Namespace | Usage) -> tuple[Command, argparse.Namespace]:
    """A Slurm function's row and arguments: dacctl's parse, or `argv` parsed as it parses it."""
    from daccore.services.command_table import Usage, parse_function

    if isinstance(argv, Usage):
        raise argv
    if isinstance(argv, argparse.Namespace):
        return argv.command, argv
    return parse_function(argv)


def settings_for_caller() -> Json:
    """The cached config, once the caller is known to be root or SlurmUser. Anyone else is
    refused before any argument is looked at (a user reaching dacctl through a setuid wrapper
    or a misconfigured GetSysStatus gets nothing done as root)."""
    from daccore.services.slurm_args import require_slurm
    from daccore.settings.cache import load_settings

    try:
        settings = load_settings()
    except Exception:  # noqa: BLE001 - unreadable config: only root may go on, to be told why
        if os.getuid() != 0:
            require_slurm(None)
        raise
    settings["trusted_uids"] = require_slurm(settings["slurm_user"])
    return settings


def _checked(
    row: Command,
    args: argparse.Namespace,
    settings: Json,
    files: CallFiles,
    script: bytes | None,
    pathfile_reply: bool,
) -> SlurmCall:
    """Every argument Slurm passes, checked before any is used (slurm_args.py), as the call
    its handler takes; the files it names opened into `files`."""
    from daccore.services import slurm_args as sa
    from daccore.services.slurm_functions import SlurmCall

    trusted, minimum = settings["trusted_uids"], settings["min_owner_uid"]
    function = args.function
    if args.token is not None:
        if function == "create_persistent":
            from daccore.rules.directives import PERSISTENT_NAME

            if not PERSISTENT_NAME.fullmatch(args.token):
                raise sa.Refused(
                    f"create_persistent: name {args.token!r} must start with a "
                    "letter and contain only letters, digits, _ . -"
                )
        else:
            sa.token(args.token, row.named)
    for name in ("user", "groupid"):
        if getattr(args, name) is not None:
            sa.owner_id(getattr(args, name), f"--{name}", minimum)
    if args.array_job is not None:
        sa.job_id(args.array_job, "--array-job")
    # --job is opened (and checked) by the functions that read the script, when they do
    # (slurm_functions.script_bytes): data_in, post_run, data_out and teardown never need it,
    # so a task of a job array cancelled before Slurm made its script tears down all the same
    for name in ("nodehostnamefile", "nidlistfile", "jobexecutionnodefile"):
        path = getattr(args, name)
        if path is not None:
            job = sa.job_id(args.token or "", "--token")
            fd = sa.open_read(path, f"the node file (--{name})", trusted, job, ("client_nids",))
            if name == "nodehostnamefile":
                files.nodes = fd
            else:  # checked as Slurm's, never read
                os.close(fd)
    reply = pathfile_reply and function == "paths"
    if args.pathfile is not None:
        if function != "paths":
            raise sa.Refused(f"--pathfile is for --function paths only, not {function}")
        job = sa.job_id(args.token or "", "--token")
        if reply:  # the caller writes its own file (answer())
            sa.check_name(args.pathfile, "the path file", job, ("path", "pathfile"))
        else:
            files.pathfile = sa.open_write(
                args.pathfile, "the path file", trusted, job, ("path", "pathfile")
            )
    return SlurmCall(
        function,
        token=args.token,
        job=args.job,
        user=args.user,
        groupid=args.groupid,
        capacity=args.capacity,
        access=args.access,
        type=args.type,
        nodes=args.nodes,
        array_job=args.array_job,
        hurry=args.hurry,
        pathfile_reply=reply,
        script=script if function == "job_process" else None,
        trusted=trusted,
        hot=row.hot,
        files=files,
    )


def _one_line(text: str) -> str:
    """Slurm shows stdout as the message: never more than one line of it, and no control
    character (it reaches sbatch's terminal and the job's Reason). At most LINE_MAX
    characters, a long one cut in its middle: a message ends with who must act and what
    was kept ("an admin must end them; nothing was zeroed or released"), and a list of
    long paths before it must not cut that off."""
    from daccore.errors import clipped
    from daccore.escape import printable

    return clipped(printable(" ".join(text.split("\n")).strip()), LINE_MAX)


#: Slurm's one line: how much of it dac fills (`_one_line`)
LINE_MAX = 1000


def _need(row: Command, args: argparse.Namespace) -> None:
    """What the function cannot do without (its row's `needs`): Cray's protocol makes every
    option optional."""
    missing = [n for n in row.needs if getattr(args, n) is None]
    if missing:
        raise _Usage(f"--function {args.function} needs --{' --'.join(missing)}")


def _dispatch(row: Command, call: SlurmCall, settings: Json, store: Store | None) -> str:
    """The function's handler, as its row says it runs: inside slurmctld (`hot`) on the lean
    path, a call for a job's buffer (`rides_out`) again while etcd is out of reach, the others
    once."""
    if row.hot:
        return _hot(row, call, settings, store)
    if not row.rides_out:
        return _full(row, call, settings)
    return _riding_out_etcd(lambda: _slurmscriptd(row, call, settings), settings["restart_grace"])


def _slurmscriptd(row: Command, call: SlurmCall, settings: Json) -> str:
    if row.stages and call.token and _nothing_to_stage(row.stages, call.token, settings):
        return ""
    return _full(row, call, settings)


def _riding_out_etcd(attempt: Callable[[], str], grace: float) -> str:
    """`attempt()`, again from the start while etcd stays out of reach, for `grace` seconds from
    the first failure; then its one line, saying how long it waited."""
    import time

    from daccore.errors import StoreUnavailable

    began, first = time.monotonic(), None
    while True:
        try:
            return attempt()
        except StoreUnavailable as e:
            now = time.monotonic()
            first = now if first is None else first
            if grace <= 0:
                raise  # restart_grace 0: fail at once, as before the grace existed
            if now - first >= grace:
                raise StoreUnavailable(
                    e.endpoints, f"still after restart_grace, {grace:.0f}s", now - began
                ) from None
            time.sleep(min(1.0, grace - (now - first)))


def _nothing_to_stage(lines: str, token: str, settings: Json) -> bool:
    """No buffer, or one without `lines` (stage_in, stage_out) whose hosts all live: data_in
    (data_out) has nothing to do, so it answers on the lean path. dacd still walks the buffer
    through the (empty) stage step on its way to the next state
    (daccore/records/lifecycle.py). A host down is the full path's to report."""
    from daccore.records import buffer_doc
    from daccore.store import Store

    store = Store.from_dict(settings["etcd"], transport="http")
    buffer = store.buffer_json(token)
    if buffer is None:
        return True
    hosts = buffer_doc.hosts(buffer)
    return not buffer["request"].get(lines) and set(hosts) <= store.alive_among(hosts)


def warm() -> None:
    """What the hot functions' first call would load, loaded now (the answerer, at its start):
    their parse tables (command_table.py, built by argparse once each) and the modules their
    answers import. Slurm calls paths once a job starts, long after the answerer started: its
    first call paid 0.4 ms for its table alone."""
    from daccore.rules import directives, inventory  # noqa: F401
    from daccore.services import jobs, slurm_args  # noqa: F401
    from daccore.services.command_table import FUNCTIONS, parse_function

    for row in FUNCTIONS:
        if row.hot:
            parse_function(["--function", row.name.split()[-1]])
            row.load()


def _hot(row: Command, call: SlurmCall, settings: Json, store: Store | None) -> str:
    """job_process, pools, paths: inside slurmctld, so no pydantic, yaml or grpc; and pools
    no more than its read (slurmctld calls it every scheduling pass). `store`: the
    answerer's, else etcd through the http transport."""
    if store is None:
        from daccore.store import Store

        store = Store.from_dict(settings["etcd"], transport="http", max_timeout=hot_timeout())
    result: str = row.load()(call, settings, store)
    return result


def _full(row: Command, call: SlurmCall, settings: Json) -> str:
    """The functions Slurm runs in slurmscriptd, with the cached config and the http transport
    as on the lean path (each call is a process: yaml, config validation and grpc would cost
    0.25 s of it; docs/performance.md)."""
    from daccore.store import Store

    store = Store.from_dict(settings["etcd"], transport="http")
    result: str = row.load()(call, settings, store)
    return result
