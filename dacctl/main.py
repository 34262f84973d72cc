"""The `dacctl` entry point: parses argv once (dacctl/commands.py), checks who may run the
command, runs its handler, and is the one place that turns a DacError into a line and an exit
code. Slurm's functions answer by their own protocol (dacctl/datawarp.py).

Kept free of heavy imports: a command loads pydantic, rich and the store only when it runs.
"""

from __future__ import annotations

import signal
import sys

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    import argparse

    from daccore.services.command_table import Command


def _unblock_termination() -> None:
    """slurmctld blocks SIGTERM, SIGINT, SIGHUP and SIGQUIT in its threads, and Slurm's
    run_command (burst_buffer/datawarp's dw_wlm_cli calls) forks and execs from them without
    unblocking: such a dacctl, waiting for a stage, would outlive a SIGTERM. systemd's stop of a
    crashed or stopped slurmctld SIGTERMs what is left in its cgroup and, past TimeoutStopSec
    (90 s), SIGKILLs it: the restart waited that long. Unblocked, the call ends at once; what
    it asked of dac stays in etcd and Slurm asks again after its restart."""
    signal.pthread_sigmask(
        signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _unblock_termination()
    from dacctl.commands import SLURM, Exit, Usage, parse

    try:
        command, args = parse(argv)
    except Exit as e:
        return e.status
    except Usage as e:
        if e.command is not None and e.command.who == SLURM:
            from dacctl.datawarp import run

            return run(e)  # the caller is checked before the refusal is told
        from daccore.escape import printable

        where, message = e.where, e.message.rstrip(".")
        print(printable(f"{where}: usage error: {message} (see {where} --help)"), file=sys.stderr)
        return 2
    if command.who == SLURM:
        from dacctl.datawarp import run

        return run(args)
    return _run(command, args)


def _run(command: Command, args: argparse.Namespace) -> int:
    """A people's command: its handler with its arguments; a DacError is one line on stderr
    and the exit code of its kind."""
    from daccore.errors import DacError
    from dacctl.commands import ROOT

    try:
        if command.who == ROOT:
            _require_root(command.name)
        command.load()(**command.values(args))
        return 0
    except DacError as e:
        if args.debug:
            raise
        from daccore.escape import printable

        print(printable(f"dacctl: {e.kind.value} error: {e}"), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("dacctl: interrupted", file=sys.stderr)
        return 130


def _require_root(name: str) -> None:
    """ROOT's commands: the local DAC's (its processes, loop devices and mounts are root's, and
    daclocal.cluster refuses a workdir or state file anyone else could have written)."""
    import os

    from daccore.errors import UserError

    if os.geteuid() != 0 or os.getuid() != 0:
        raise UserError(
            f"dacctl {name} is for root only: it runs etcd, dacd and loop devices as root"
        )


if __name__ == "__main__":
    sys.exit(main())
