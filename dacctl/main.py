"""The `dacctl` entry point: the one place that turns a DacError into a line and an exit code.

Kept free of heavy imports: the commands load click, pydantic and the store only when they run.
"""

from __future__ import annotations

import signal
import sys


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
    # Slurm's dw_wlm_cli protocol: its own lean path and error rules, and root or SlurmUser
    # only (dacctl/slurm_args.py); "--function=x" and argparse's abbreviations go there too
    if any(a.startswith("--fu") for a in argv):
        from dacctl.datawarp import run

        return run(argv)
    debug = "--debug" in argv
    from daccore.errors import DacError

    try:
        from dacctl.cli import cli

        return (
            cli.main(
                args=[a for a in argv if a != "--debug"], prog_name="dacctl", standalone_mode=False
            )
            or 0
        )
    except DacError as e:
        if debug:
            raise
        from daccore.escape import printable

        print(printable(f"dacctl: {e.kind.value} error: {e}"), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("dacctl: interrupted", file=sys.stderr)
        return 130
    except _click_errors() as e:
        import click

        if isinstance(e, click.UsageError):  # click's own is four lines: usage, hint, error
            from daccore.escape import printable

            where = e.ctx.command_path if e.ctx else "dacctl"
            message = e.format_message().rstrip(".")
            print(
                printable(f"{where}: usage error: {message} (see {where} --help)"), file=sys.stderr
            )
            return e.exit_code
        if isinstance(e, click.ClickException):
            e.show()
            return e.exit_code
        print("dacctl: aborted", file=sys.stderr)  # click.Abort: a prompt was interrupted
        return 1


def _click_errors() -> tuple[type[BaseException], ...]:
    import click

    return (click.ClickException, click.exceptions.Abort)


if __name__ == "__main__":
    sys.exit(main())
