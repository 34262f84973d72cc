"""`dacctl --function <f> …`: Cray's dw_wlm_cli protocol, as Slurm's burst_buffer/datawarp calls
it, and as slurm-plugin/burst_buffer.lua calls it for burst_buffer/lua (one contract
for both).

Only Slurm may call it: root or the config's slurm_user; anyone else is refused with one line
before any argument is read, and every argument is checked before use (dacctl/slurm_args.py:
job ids, owners at or above min_owner_uid, files reached without following links through
directories only root or SlurmUser can change). `scontrol show bbstat` never comes here; it runs
the read-only dac-bbstat (dacctl/bbstat.py).

Success: exit 0, the function's output on stdout. Failure: exit 1 and one line on stdout, which
Slurm shows the user (sbatch's error, or the job's Reason). Never a traceback: unexpected errors
become one line too, with the traceback on stderr only under --debug.

job_process, pools and paths run inside slurmctld under its locks, so they take the lean path:
the cached config (`daccore.settings.cache`), the standard-library `http` etcd transport with
retries capped at HOT_TIMEOUT seconds, and JSON reads; no pydantic, yaml or grpc is imported
(bench/hot_path.py, docs/performance.md). The other functions run in slurmscriptd with the
same cached config and transport: setup and create_persistent build a spec with the pydantic
records; the calls after it read and change specs as JSON (daccore/services/jobs.py says why).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

from daccore.settings.cache import ConfigView  # the hooks load the config through it anyway

#: Longest a hook inside slurmctld waits for an unreachable etcd before failing.
HOT_TIMEOUT = 2.0
#: Longest setup waits for a persistentdw buffer that does not exist yet (submitted before
#: the job that makes it): burst_buffer/datawarp holds the job until Slurm knows the buffer,
#: burst_buffer/lua cannot, and holds it once setup fails, for its owner to release.
PERSISTENT_WAIT = 30.0
HOT = ("job_process", "pools", "paths")


def hot_timeout() -> float:
    """HOT_TIMEOUT, or what burst_buffer.lua has left of it (DAC_HOT_TIMEOUT) when it forks
    dacctl after the answerer could not answer: slurmctld waits 2 s at most in all."""
    try:
        return min(HOT_TIMEOUT, max(0.1, float(os.environ["DAC_HOT_TIMEOUT"])))
    except (KeyError, ValueError):
        return HOT_TIMEOUT


class _Usage(Exception):
    """A function's arguments refused after parsing (`_need`): one line, exit 1."""


def run(parsed) -> int:
    """`dacctl --function …` forked: dacctl.main's parse of its argv (dacctl/commands.py), the
    arguments of a Slurm function or the Usage that refused them, answered by Slurm's protocol."""
    rc, out, err = answer(parsed)
    sys.stderr.write(err)
    sys.stdout.write(out)
    return rc


def answer(
    argv,
    settings: dict | None = None,
    store=None,
    script: bytes | None = None,
    pathfile_reply: bool = False,
) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `dacctl --function argv`: the one place of every
    answer, for the forked command and for the warm answerer (dacservice/answerer.py), which
    passes `settings` (settings_for_caller's, once it has checked its peer's credentials) and
    a `store` reading its in-memory mirror. Files this call opened are closed when it ends:
    the answerer lives on. `argv`: the words after `dacctl`, or dacctl.main's parse of them
    (a Namespace, or the Usage that refused them), told only once the caller is known.
    `script`: the job script's bytes as the caller read them from --job's path (the answerer's
    peer, slurmctld: root or SlurmUser), for job_process, which then opens no file.
    `pathfile_reply`: paths answers the path file's lines on stdout and opens no file (its
    name still checked): the answerer's peer writes them into its own file."""
    from dacctl.commands import Exit, Usage
    from dacctl.slurm_args import Refused

    debug = (
        argv.debug
        if isinstance(argv, argparse.Namespace)
        else isinstance(argv, list) and "--debug" in argv
    )
    args = None
    try:
        if settings is None:
            settings = settings_for_caller()
        args = _parsed(argv)
        args.pathfile_reply = pathfile_reply and args.function == "paths"
        _check_args(args, settings)
        args.script_data = script if args.function == "job_process" else None
        out = _dispatch(args, settings, store)
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
        if args is not None and store is not None:
            _close_files(args)


def _parsed(argv) -> argparse.Namespace:
    """A Slurm function's arguments: dacctl.main's, or `argv` parsed by the one parser."""
    from dacctl.commands import SLURM, Usage, parse

    if isinstance(argv, Usage):
        raise argv
    if isinstance(argv, argparse.Namespace):
        return argv
    command, args = parse(list(argv))
    if command.who != SLURM:
        raise Usage("dacctl", f"dacctl {command.name} is not one of Slurm's functions", command)
    return args


def _close_files(args) -> None:
    """The job script's and the path file's descriptors, if still open (the lean functions
    leave the script's to the process's exit, and the path file's on an error before it)."""
    for name in ("job_fd", "pathfile"):
        fd = getattr(args, name, None)
        if isinstance(fd, int):
            setattr(args, name, None)
            os.close(fd)


def settings_for_caller() -> dict:
    """The cached config, once the caller is known to be root or SlurmUser. Anyone else is
    refused before any argument is looked at (a user reaching dacctl through a setuid wrapper
    or a misconfigured GetSysStatus gets nothing done as root)."""
    import os

    from daccore.settings.cache import load_settings
    from dacctl.slurm_args import require_slurm

    try:
        settings = load_settings()
    except Exception:  # noqa: BLE001 - unreadable config: only root may go on, to be told why
        if os.getuid() != 0:
            require_slurm(None)
        raise
    settings["trusted_uids"] = require_slurm(settings["slurm_user"])
    return settings


#: Functions whose token may be a persistent buffer's name rather than a job id.
_NAMED = ("create_persistent", "teardown")


def _check_args(args, settings: dict) -> None:
    """Every argument Slurm passes, checked before any is used (dacctl/slurm_args.py)."""
    from dacctl import slurm_args as sa

    trusted, minimum = settings["trusted_uids"], settings["min_owner_uid"]
    if args.token is not None:
        if args.function == "create_persistent":
            from daccore.rules.directives import PERSISTENT_NAME

            if not PERSISTENT_NAME.fullmatch(args.token):
                raise sa.Refused(
                    f"create_persistent: name {args.token!r} must start with a "
                    "letter and contain only letters, digits, _ . -"
                )
        else:
            sa.token(args.token, args.function in _NAMED)
    for name in ("user", "groupid"):
        if getattr(args, name) is not None:
            sa.owner_id(getattr(args, name), f"--{name}", minimum)
    if args.array_job is not None:
        sa.job_id(args.array_job, "--array-job")
    # --job is opened (and checked) by the functions that read the script, when they do
    # (_script): data_in, post_run, data_out and teardown never need it, so a task of a job
    # array cancelled before Slurm made its script tears down all the same
    args.job_fd, args.trusted = None, trusted
    for name in ("nodehostnamefile", "nidlistfile", "jobexecutionnodefile"):
        path = getattr(args, name)
        if path is not None:
            job = sa.job_id(args.token or "", "--token")
            setattr(
                args,
                name,
                sa.open_read(path, f"the node file (--{name})", trusted, job, ("client_nids",)),
            )
    if args.pathfile is not None:
        if args.function != "paths":
            raise sa.Refused(f"--pathfile is for --function paths only, not {args.function}")
        job = sa.job_id(args.token or "", "--token")
        if getattr(args, "pathfile_reply", False):  # the caller writes its own file (answer())
            sa.check_name(args.pathfile, "the path file", job, ("path", "pathfile"))
        else:
            args.pathfile = sa.open_write(
                args.pathfile, "the path file", trusted, job, ("path", "pathfile")
            )


def _one_line(text: str) -> str:
    """Slurm shows stdout as the message: never more than one line of it, and no control
    character (it reaches sbatch's terminal and the job's Reason)."""
    from daccore.escape import printable

    return printable(" ".join(text.split("\n")).strip())[:1000]


def _need(args, *names: str) -> None:
    missing = [n for n in names if getattr(args, n) is None]
    if missing:
        raise _Usage(f"--function {args.function} needs --{' --'.join(missing)}")


def _script_fd(args) -> int:
    """The job script, checked (dacctl/slurm_args.py) and opened once. A job array's task
    whose script Slurm never wrote (24.11+) gets the array's, linked where Slurm looks for
    it: the array's id is the one burst_buffer.lua passes paths (--array-job, job_info), else
    scontrol's, asked only outside slurmctld (a hook inside it holds the job lock scontrol
    needs)."""
    from dacctl import slurm_args as sa

    if args.job_fd is None:
        try:
            args.job_fd = sa.open_read(args.job, "the job script", args.trusted, None, ("script",))
        except sa.Missing:
            if args.token is None or (args.function in HOT and args.array_job is None):
                raise
            args.job_fd = sa.link_task_script(
                args.job, args.token, lambda: args.array_job or _array_of(args.token), args.trusted
            )
    return args.job_fd


def _array_of(job: str) -> str | None:
    from dacctl.slurmjob import array_job_id

    return array_job_id(job)


def _script(args, lua_directive: str, data: bytes | None = None):
    """The job script's directives (`data`: its bytes, if already read)."""
    from daccore.rules.directives import parse_script

    if data is None:
        data = _script_bytes(args)
    if args.function not in HOT or len(data) > PARSE_CACHE_BYTES:
        return parse_script(data, lua_directive)
    return _copy(_parse_cached(data, lua_directive))


def _script_bytes(args) -> bytes:
    """The job script's first bytes: as far as its leading comment block, the only part a
    parse reads, goes (or past that block's bound), so a long script costs one read."""
    from daccore.errors import AdminError
    from daccore.rules.directives import head_read

    given = getattr(args, "script_data", None)
    if given is not None:  # the answerer's peer read it (answer())
        return given
    fd = _script_fd(args)
    try:  # read from the start each time: a call run again after etcd came back reads it anew
        os.lseek(fd, 0, os.SEEK_SET)
        data = bytearray()
        while chunk := os.read(fd, READ_CHUNK):
            data += chunk
            if head_read(data, len(data) - len(chunk)):
                break
    except OSError as e:
        raise AdminError(f"cannot read the job script {args.job}: {e.strerror}") from None
    return bytes(data)


#: what _script_bytes reads at once: all of most scripts, and a sixteenth of the most a parse
#: reads (daccore.records.bounds.MAX_SCRIPT_HEAD)
READ_CHUNK = 64 << 10


#: job_process and paths parse their script on every call: the warm answerer keeps the last
#: PARSE_CACHE parses of scripts up to PARSE_CACHE_BYTES long, keyed by the script's bytes
#: themselves (compared whole, never a digest) and the only setting the parse reads
#: (lua_directive). A script is still read on every call; a refused one is parsed again.
PARSE_CACHE = 256
PARSE_CACHE_BYTES = 64 << 10


@functools.lru_cache(maxsize=PARSE_CACHE)
def _parse_cached(data: bytes, lua_directive: str):
    from daccore.rules.directives import parse_script

    return parse_script(data, lua_directive)


def _copy(found):
    """A cached parse's own copy for one call: its lists are new (their items are tuples)."""
    from daccore.rules.directives import Directives

    copy = Directives()
    for name in Directives.__slots__:
        value = getattr(found, name)
        setattr(copy, name, list(value) if isinstance(value, list) else value)
    return copy


#: The functions Slurm runs in slurmscriptd for a job's buffer. Each rides out etcd out of
#: reach (quorum lost, members restarting) for `restart_grace` seconds, as it rides out a dacd
#: restart, by running again from the start: each is idempotent, since Slurm itself runs them
#: again after a slurmctld restart, so a job ending during an outage goes on when etcd is back
#: instead of being left in stage-out for an admin (docs/reliability.md).
RIDE_OUT = ("setup", "data_in", "pre_run", "post_run", "data_out", "teardown")


def _dispatch(args, settings: dict, store=None) -> str:
    """Slurm's function `args.function`, after what it cannot do without (its `needs` in
    dacctl/commands.py): the hooks inside slurmctld (HOT) on the lean path, the calls for a
    job's buffer riding out etcd (RIDE_OUT), the others once."""
    _need(args, *_function(args).needs)
    if args.function in HOT:
        return _hot(args, settings, store)
    if args.function not in RIDE_OUT:
        return _full(args, settings)
    return _riding_out_etcd(lambda: _slurmscriptd(args, settings), settings["restart_grace"])


def _slurmscriptd(args, settings: dict) -> str:
    if (
        args.function in ("data_in", "data_out")
        and args.token
        and _nothing_to_stage(args, settings)
    ):
        return ""
    return _full(args, settings)


def _riding_out_etcd(call, grace: float) -> str:
    """`call()`, again from the start while etcd stays out of reach, for `grace` seconds from
    the first failure; then its one line, saying how long it waited."""
    import time

    from daccore.errors import StoreUnavailable

    began, first = time.monotonic(), None
    while True:
        try:
            return call()
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


def _nothing_to_stage(args, settings: dict) -> bool:
    """No buffer, or one without stage_in (stage_out) lines whose hosts all live: data_in
    (data_out) has nothing to do, so it answers on the lean path. dacd still walks the buffer
    through the (empty) stage step on its way to the next state (daccore/records/lifecycle.py). A
    host
    down is the full path's to report."""
    from daccore.records import buffer_doc
    from daccore.store import Store

    store = Store.from_dict(settings["etcd"], transport="http")
    buffer = store.buffer_json(args.token)
    if buffer is None:
        return True
    lines = "stage_in" if args.function == "data_in" else "stage_out"
    hosts = buffer_doc.hosts(buffer)
    return not buffer["request"].get(lines) and set(hosts) <= store.alive_among(hosts)


def warm() -> None:
    """What the hot functions' first call would load, loaded now (the answerer, at its start):
    their argument tables (dacctl/commands.py, built by argparse once each) and the modules
    their answers import. Slurm calls paths once a job starts, long after the answerer
    started: its first call paid 0.4 ms for its table alone."""
    from daccore.rules import directives, inventory  # noqa: F401
    from daccore.services import jobs  # noqa: F401
    from dacctl import commands, slurm_args  # noqa: F401

    for name in HOT:
        commands._function_table(name)


def _hot(args, settings: dict, store=None) -> str:
    """job_process, pools, paths: inside slurmctld, so no pydantic, yaml or grpc; and pools
    no more than its read (slurmctld calls it every scheduling pass). `store`: the
    answerer's, else etcd through the http transport."""
    if store is None:
        from daccore.store import Store

        store = Store.from_dict(settings["etcd"], transport="http", max_timeout=hot_timeout())
    return _function(args).load()(args, settings, store)


def _full(args, settings: dict) -> str:
    """The functions Slurm runs in slurmscriptd, with the cached config and the http transport
    as on the lean path (each call is a process: yaml, config validation and grpc would cost
    0.25 s of it; docs/performance.md)."""
    from daccore.store import Store

    store = Store.from_dict(settings["etcd"], transport="http")
    return _function(args).load()(args, settings, store)


def _function(args):
    """Slurm's function `args.function`: its entry in dacctl/commands.py's table."""
    from dacctl.commands import command

    return command(f"function {args.function}")


# -- each function's handler, as the table names it: (args, settings, store) -> its stdout -----


def pools(args, settings: dict, store) -> str:
    from daccore.rules.inventory import summarize

    return json.dumps(
        {
            "pools": [
                {
                    "id": s.name,
                    "units": "bytes",
                    "granularity": s.granularity,
                    "quantity": s.total,
                    "free": s.free,
                }
                for s in summarize(store.summary_inventory())
            ]
        }
    )


def job_process(args, settings: dict, store) -> str:
    from daccore.services import jobs

    data = _script_bytes(args)
    pool, directive = settings["default_pool"], settings["lua_directive"]
    jobs.validate(store, _script(args, directive, data), pool, args.user)
    return ""  # the answerer keeps this answer by what it read (answerer.py, VALID_KEPT)


def paths(args, settings: dict, store) -> str:
    from daccore.services import jobs

    buffer = store.buffer_json(args.token)
    if buffer is not None:
        text = buffer_paths(args.token, buffer, settings["mount_root"])
    else:  # no jobdw: the job may still attach persistent buffers
        persistent = _script(args, settings["lua_directive"]).persistent if args.job else []
        text = _lines(jobs.paths_for(args.token, "", persistent, settings["mount_root"]))
    if getattr(args, "pathfile_reply", False):  # the answerer's peer writes them (answer())
        return text
    fd, args.pathfile = args.pathfile, None
    try:  # the fd _check_args opened; os.write, not a text file's buffer and encoder
        data = text.encode()
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    return ""


def buffer_paths(token: str, buffer: dict, mount_root: str) -> str:
    """The path file's text of job `token` whose buffer spec (JSON, as etcd holds it) is
    `buffer`: the one place of it, for `paths` and for the answerer's paths files
    (dacservice/pathsfiles.py)."""
    from daccore.services import jobs

    request = buffer["request"]
    return _lines(jobs.paths_for(token, request["access"], request["persistent"], mount_root))


def _lines(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def show(args, settings: dict, store) -> str:
    """show_instances, show_sessions, show_configurations: what `scontrol show dwstat` shows
    too (bbstat.py)."""
    from daccore.services.dws import sessions

    found = sessions(store.buffer_docs())
    if args.function == "show_instances":
        return json.dumps(
            {
                "instances": [
                    {
                        "id": s.name,
                        "capacity": {"bytes": s.size, "nodes": 0},
                        "links": {"session": s.name},
                    }
                    for s in found
                ]
            }
        )
    if args.function == "show_sessions":
        return json.dumps(
            {
                "sessions": [
                    {"id": s.name, "created": s.created, "owner": s.owner, "token": s.name}
                    for s in found
                ]
            }
        )
    return json.dumps(
        {"configurations": [{"id": s.name, "links": {"instance": s.name}} for s in found]}
    )


def setup(args, settings: dict, store) -> str:
    from daccore.records.states import State
    from daccore.rules.trust import check_owner
    from daccore.services import jobs

    config = ConfigView(settings)
    check_owner(args.user, args.groupid, settings.get("min_owner_uid", 1000))
    directives = _script(args, config.lua_directive)
    if args.capacity is not None:
        _agrees_with_slurm(args.capacity, directives, config.default_pool, store)
    jobs.await_persistent(store, directives, min(config.step_timeout, PERSISTENT_WAIT), args.token)
    _carried_out_by_slurm(store, directives, args.user, args.token)
    if jobs.create_job_buffer(
        _allocating(settings, store),
        int(args.token),
        args.user,
        args.groupid,
        directives,
        config.default_pool,
        config.own_mgs_pools(),
        settings.get("held_share", 1.0),
    ):
        jobs.wait_for(
            store, args.token, State.CREATED, config.step_timeout, grace=config.restart_grace
        )
    return ""


def _carried_out_by_slurm(store, d, uid: int, job: str) -> None:
    """UserError, one line, when a create_persistent line's buffer does not exist at setup, or
    a destroy_persistent line's (the caller's) still does. Slurm carries these lines out, not
    dac: burst_buffer/datawarp runs a `#BB` one (`create_persistent`, `teardown --token
    <name>`) before the job's setup and, while a buffer to destroy is attached elsewhere, keeps
    the job pending with teardown's refusal as its reason and asks again; burst_buffer/lua
    runs none. Going on, the job would end well with the buffer neither made nor destroyed and
    nothing said (issue 45); refused, Slurm holds it with this line. Another user's buffer is
    left to validate's refusal, which names no attachment."""
    from daccore.errors import UserError

    for c in d.create:
        if store.buffer_json(c.name) is None:
            raise UserError(
                f"line {c.line}: create_persistent: persistent buffer '{c.name}' does not "
                "exist: Slurm did not create it (burst_buffer/lua never does): create it "
                f"(dacctl create-persistent --name {c.name} --capacity SIZE) and release the "
                f"job (scontrol release {job})"
            )
    for x in d.destroy:
        buf = store.buffer_json(x.name)
        if buf is None or uid not in (0, buf.get("owner_uid")):
            continue
        attached = sorted(buf.get("attachments") or {})
        why = (
            f"it is attached to job {', '.join(attached)}; once no job uses it, destroy it"
            if attached
            else "Slurm did not destroy it (burst_buffer/lua never does): destroy it"
        )
        raise UserError(
            f"line {x.line}: destroy_persistent: persistent buffer '{x.name}' still exists: "
            f"{why} (dacctl destroy-persistent {x.name}) and release the job (scontrol "
            f"release {job})"
        )


def _agrees_with_slurm(capacity: str, d, default_pool: str | None, store) -> None:
    """setup's `--capacity POOL:SIZE`, what Slurm accounts for the job, checked against the
    script as dac reads it; AdminError naming both when they disagree. Slurm's size may be
    more than the jobdw's capacity (it rounds up to a pool's granularity; burst_buffer/datawarp
    adds `#DW swap`, burst_buffer/lua every line's `capacity=`), never less; its pool is the
    jobdw's (burst_buffer/lua: the last `capacity=` line's, so a script that also creates a
    persistent buffer is checked on its size alone). A Slurm that accounts a buffer the script
    holds no jobdw for (nor a create_persistent) reads directives dac does not."""
    from daccore.errors import AdminError
    from daccore.services.jobs import pick_pool
    from daccore.units import format_size
    from dacctl.slurm_args import capacity as pool_size

    pool, size = pool_size(capacity)
    jobdw = d.jobdw
    if jobdw is None:
        if size and not d.create:
            raise AdminError(
                f"setup: Slurm accounts --capacity {capacity} for the job, but dac reads no "
                "jobdw in its script: dac.yaml's lua_directive must be burst_buffer.conf's "
                "Directive"
            )
        return
    ours = pick_pool(
        jobdw.pool, default_pool, [] if jobdw.pool or default_pool else [*store.pools()]
    )
    if size < jobdw.capacity:
        why = "Slurm accounts less than dac would allocate"
    elif pool != ours and not d.create:
        why = (
            "a different pool: burst_buffer.conf's DefaultPool and dac.yaml's default_pool "
            "must name the same one"
        )
    else:
        return
    raise AdminError(
        f"setup: Slurm's --capacity {capacity} disagrees with the script's jobdw (line "
        f"{jobdw.line}: {format_size(jobdw.capacity)} in pool '{ours}'): {why}"
    )


def real_size(args, settings: dict, store) -> str:
    from daccore.records import buffer_doc

    current = store.buffer_json(args.token)
    size = buffer_doc.size(current) if current else 0
    return json.dumps({"token": args.token, "capacity": size, "units": "bytes"})


def stage(args, settings: dict, store) -> str:
    """data_in, data_out: the buffer's desired state staged_in, staged_out, and the wait."""
    from daccore.records.states import State
    from daccore.services import jobs

    config = ConfigView(settings)
    state = State.STAGED_IN if args.function == "data_in" else State.STAGED_OUT
    if jobs.set_desired(store, args.token, state, retry=True):
        jobs.wait_for(store, args.token, state, config.stage_timeout, grace=config.restart_grace)
    return ""


def pre_run(args, settings: dict, store) -> str:
    _pre_run(store, ConfigView(settings), args)
    return ""


def post_run(args, settings: dict, store) -> str:
    _post_run(store, ConfigView(settings), args.token)
    return ""


def teardown(args, settings: dict, store) -> str:
    _teardown(store, ConfigView(settings), args.token, args.hurry)
    return ""


def create_persistent(args, settings: dict, store) -> str:
    from daccore.errors import UserError
    from daccore.records.states import State
    from daccore.rules.directives import PERSISTENT_NAME
    from daccore.rules.trust import check_owner
    from daccore.services import jobs
    from daccore.units import parse_size

    config = ConfigView(settings)
    if not PERSISTENT_NAME.match(args.token):
        raise UserError(
            f"create_persistent: name '{args.token}' must start with a letter and "
            "contain only letters, digits, _ . -"
        )
    access, type_ = args.access or "striped", args.type or "scratch"
    if type_ != "scratch":  # the access mode is jobs.create_persistent's to judge
        raise UserError(f"create_persistent: type '{type_}' must be scratch")
    pool, _, size = args.capacity.rpartition(":")
    try:
        capacity = parse_size(size)
    except ValueError as e:
        raise UserError(f"create_persistent: capacity {e}") from None
    gid = (
        args.groupid
        if args.groupid is not None
        else _primary_gid(args.user, settings["min_owner_uid"])
    )
    check_owner(args.user, gid, settings["min_owner_uid"])
    jobs.create_persistent(
        _allocating(settings, store),
        args.token,
        args.user,
        gid,
        capacity,
        pool or None,
        access,
        type_,
        config.default_pool,
        config.own_mgs_pools(),
        settings.get("persistent_caps"),
        settings.get("held_share", 1.0),
    )
    jobs.wait_for(store, args.token, State.CREATED, config.step_timeout, grace=config.restart_grace)
    return f"created {args.token}"


def _allocating(settings: dict, store):
    """The store an allocation reads and claims through: the configured transport (gRPC by
    default), not the gateway the other calls use. Placement's reads are ~1,000 small ranges
    at 1,000 servers, which etcd's JSON gateway costs ~60 ms of etcd's CPU a setup and gRPC a
    fraction of (bench/scale.py): etcd is shared by every call, the ~150 ms of importing gRPC
    is this process's alone."""
    from daccore.store import Store

    if settings["etcd"]["transport"] == "http":
        return store
    return Store.from_dict(settings["etcd"])


def _primary_gid(uid: int, minimum: int) -> int:
    """Slurm's create_persistent passes no group: the owner's primary one, as DataWarp did."""
    import pwd

    from dacctl.slurm_args import Refused, owner_id

    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        raise Refused(f"create_persistent: uid {uid} has no account here, so no group") from None
    return owner_id(gid, "the owner's group", minimum)


def _pre_run(store, config, args) -> None:
    """Mount the job's buffer and the persistent buffers it attaches on its nodes."""
    from daccore.errors import UserError
    from daccore.records import buffer_doc
    from daccore.records.states import State
    from daccore.services import jobs
    from daccore.units import format_size
    from dacctl.slurmjob import job_nodes

    job = args.token
    buf = store.buffer_json(job)
    persistent = (
        buf["request"].get("persistent", [])
        if buf
        else (_script(args, config.lua_directive).persistent if args.job else [])
    )
    if buf is None and not persistent:
        return  # nothing of dac's in this job
    nodes = job_nodes(job, args.nodehostnamefile, args.nodes)
    swap = buf["request"].get("swap", 0) if buf else 0
    if buf is not None and swap * len(nodes) > buffer_doc.size(buf):
        raise UserError(
            f"swap: {len(nodes)} nodes x {format_size(swap)} of swap is more than "
            f"the buffer holds ({format_size(buffer_doc.size(buf))})"
        )
    jobs.attach(store, job, nodes, persistent)
    if buf is not None:
        jobs.attach(store, job, nodes, [job], State.MOUNTED)
        jobs.wait_for(
            store, job, State.MOUNTED, config.step_timeout, job, grace=config.restart_grace
        )
    for name in persistent:
        jobs.wait_for(
            store, name, State.CREATED, config.step_timeout, job, grace=config.restart_grace
        )


def _post_run(store, config, job: str) -> None:
    """Unmount the job's buffers from its nodes (the job buffer stays for stage-out)."""
    from daccore.records.states import State
    from daccore.services import jobs

    persistent = jobs.attached_by(store, job)
    jobs.detach(store, job, persistent)
    if store.buffer_json(job) is not None:
        jobs.detach(store, job, [job], State.UNMOUNTED)
        jobs.wait_for(
            store, job, State.UNMOUNTED, config.step_timeout, job, grace=config.restart_grace
        )
    for name in persistent:
        jobs.wait_for(
            store, name, State.CREATED, config.step_timeout, job, grace=config.restart_grace
        )


def _teardown(store, config, token: str, hurry: bool = False) -> None:
    """A job's end (its buffer and any attachments go) or, for a persistent buffer's name,
    destroy_persistent. A job that ran but whose data_out never came is staged out first,
    unless hurry; a failed stage-out fails the teardown and keeps the buffer (Slurm holds the
    job; `scancel --hurry` then tears it down)."""
    from daccore.records.states import State
    from daccore.services import jobs

    current = store.buffer_json(token)
    if current is not None and current.get("persistent"):
        jobs.destroy(store, token)
        jobs.wait_for(store, token, State.DELETED, config.step_timeout, grace=config.restart_grace)
        return
    persistent = jobs.attached_by(store, token)  # pre_run failed, or post_run never came
    jobs.detach(store, token, persistent)
    if current is not None and not hurry and jobs.needs_stage_out(store, current):
        jobs.detach(store, token, [token], State.STAGED_OUT)
        jobs.set_desired(store, token, State.STAGED_OUT, retry=True)  # after a failed one
        jobs.wait_for(
            store, token, State.STAGED_OUT, config.stage_timeout, grace=config.restart_grace
        )
    # a delete that failed (a mount of the buffer left elsewhere) runs again at Slurm's retry
    jobs.set_desired(store, token, State.DELETED, retry=True)
    jobs.wait_for(store, token, State.DELETED, config.step_timeout, grace=config.restart_grace)
    for name in persistent:
        jobs.wait_for(
            store, name, State.CREATED, config.step_timeout, token, grace=config.restart_grace
        )
