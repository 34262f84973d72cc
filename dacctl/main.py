"""The `dacctl` entry point: the one place that turns a DacError into a line and an exit code.

Kept free of heavy imports: the commands load click, pydantic and the store only when they run.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Slurm's dw_wlm_cli protocol: its own lean path and error rules, and root or SlurmUser
    # only (dacctl/slurm_args.py); "--function=x" and argparse's abbreviations go there too
    if any(a.startswith("--fu") for a in argv):
        from dacctl.datawarp import run
        return run(argv)
    debug = "--debug" in argv
    from daccore.errors import DacError

    try:
        from dacctl.cli import cli
        return cli.main(args=[a for a in argv if a != "--debug"], prog_name="dacctl",
                        standalone_mode=False) or 0
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
            print(printable(f"{where}: usage error: {message} (see {where} --help)"),
                  file=sys.stderr)
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
