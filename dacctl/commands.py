"""Every dacctl command, declared once: its name, a one-line summary, who may run it, its
arguments, and its handler as "module:function", imported only when that command runs.

dacctl parses its argv once (`parse`), with one argparse parser built from this table. Slurm's
functions are commands like any other, in the `function` group (`pools` is also a people's
command, so Slurm's have a group of their own): `dacctl function setup --token 7 …`. The form
Slurm and burst_buffer.lua use, Cray's dw_wlm_cli `dacctl --function setup --token 7 …`, is
the same command: `--function` is an option of the one parser whose action hands the rest of
the line to the named function's parser, as data-acc's dacctl makes `--function` a
subcommand. Nothing looks at argv before it is parsed.

The row type (`Command`, `Arg`), the parser built from rows (`Table`) and Slurm's rows, the
table's last (`FUNCTIONS`, with how each runs: `hot`, `rides_out`, `named`, `stages`), are
daccore/services/command_table.py's: the answerer (dacservice/answerer/answers.py) parses
Slurm's words and reads those columns as `dacctl --function` does, and imports daccore alone. One
shortcut, for the answerer's sake: `--function NAME` followed only by options of that function
as the table spells them, each with its value (or a flag alone), is read from the table
directly (`function_words`), into the namespace argparse would give; any other line goes to
argparse.

Who may run what (`who`), and where it is checked:
  ANYONE  the services decide per object (a user sees their own buffers); nothing here
  ADMIN   root or the config's admin_group: daccore.services.admin checks it for every caller
          (these commands and the user service alike), `hosts` by its etcd credential
  ROOT    real and effective uid 0 (the local DAC's processes, loop devices and mounts):
          dacctl.main checks it before the handler runs
  SLURM   root or SlurmUser: daccore.services.slurm_answer checks it before any argument is
          looked at, and answers every refusal, a usage error included, by Slurm's protocol
          (one line on stdout, exit 1; dacctl.datawarp writes it)

Why argparse for all, not click for people's commands: the hooks inside slurmctld (job_process,
pools, paths) already imported argparse, and must import nothing more (docs/performance.md).
Measured on this 2-core machine (Debian 12's python3.11, `-X importtime`, five runs each):
`import click` 17-50 ms cumulative, `import argparse` 1.4-3.4 ms. A table generating both a
lean argparse parser for Slurm and click for people would keep two parsers, and a choice
between them before parsing. What the one argparse parser costs the hooks (2026-11-27, A/B in
one run, the checkout before and after, fresh processes): importing dacctl and parsing argv,
median 8.1 ms after, 9.5 ms before (min 5.5 / 6.7 ms). Only the parsers of the command run are
built (for a hook, the top level's and its function's, not the 36 commands'), and `Parser`
checks each argument's metavar with one formatter where argparse made one per argument, asking
the terminal its size (and importing shutil, zlib, bz2 and lzma for it). So `dacctl --function
pools` imports 130 modules where it imported 136 (job_process 140, was 146; paths 138, was
144), dacctl.commands among them, click, pydantic, yaml and rich not; a whole call's median is
unchanged within the machine's noise (bench/hot_path.py --editable). People's
commands start without click's 17+ ms. Since Slurm's functions moved to daccore (issue 47),
pools imports 134 modules where it imported 130 on the same Python, job_process and paths 139
where 136: small modules of dac's, none of weight; each median within 1 ms of before (A/B, 80
rounds interleaved, against one local DAC).
"""

from __future__ import annotations

import argparse

from daccore.services.command_table import (
    ADMIN,
    ANYONE,
    FUNCTIONS,
    ROOT,
    SLURM,
    Arg,
    Command,
    Exit,
    Table,
    Usage,
    function_words,
)

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from collections.abc import Callable
    from fractions import Fraction
    from pathlib import Path

__all__ = [
    "ANYONE",
    "ADMIN",
    "ROOT",
    "SLURM",
    "Arg",
    "Command",
    "COMMANDS",
    "Usage",
    "Exit",
    "parse",
    "command",
    "members",
]


# -- converters: argparse calls them with the text; a refusal names the value ------------------


def _size(text: str) -> int:
    from daccore.units import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_size(text: str) -> int:
    size = _size(text)
    if size <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' must be greater than zero")
    return size


def _margin(text: str) -> Fraction:
    from daccore.services.estimate import parse_margin

    try:
        return parse_margin(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in the range {low} to {high}")
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is less than {low}")
        return value

    return convert


def _path(kind: str) -> Callable[[str], Path]:
    """A path that, if it exists, must be a `kind` ("file" or "directory")."""

    def convert(text: str) -> Path:
        import os
        from pathlib import Path

        if os.path.isdir(text) if kind == "file" else os.path.isfile(text):
            other = "directory" if kind == "file" else "file"
            raise argparse.ArgumentTypeError(f"{kind} '{text}' is a {other}")
        return Path(text)

    return convert


# -- the table ---------------------------------------------------------------------------------

JSON = Arg("--json", dest="as_json", flag=True, help="machine-readable output")
WORKDIR = Arg(
    "--workdir",
    type=_path("directory"),
    default=".dac-local",
    help="where the local DAC keeps its state, bricks and logs (default: %(default)s)",
)
COMMANDS: tuple[Command, ...] = (
    Command(
        "pools",
        "Pools with their granularity and brick counts.",
        ANYONE,
        (JSON,),
        "dacctl.cli:pools",
    ),
    Command(
        "status",
        "What a buffer is doing: state per storage host, the running step, staging, errors.",
        ANYONE,
        (
            Arg("buffer", metavar="BUFFER", help="a job id, or a persistent buffer's name"),
            JSON,
            Arg("--line", flag=True, help="one line (what scontrol show bbstat <job> prints)"),
        ),
        "dacctl.cli:status",
        "Yours only, unless you are root or an admin.",
    ),
    Command(
        "hosts",
        "Storage hosts: up, drained or down, free and total bricks per pool, their buffers.",
        ADMIN,
        (JSON,),
        "dacctl.cli:hosts",
        "Down: its dacd's alive key is gone. Free: held by no buffer.",
    ),
    Command(
        "buffers",
        "Buffers with their summary state.",
        ANYONE,
        (
            Arg("--user", help="only this owner's buffers (a login name or a uid)"),
            Arg(
                "--state",
                choices="daccore.services.admin_views:STATES",
                help="only buffers in this summary state",
            ),
            Arg("--pool", help="only buffers in this pool"),
            JSON,
        ),
        "dacctl.cli:buffers",
        "The state is the lowest any host reached; error when a host failed the current spec;"
        " new before any host reported. Yours only, unless you are root or an admin.",
    ),
    Command(
        "show",
        "Everything about a buffer: its spec, each host's status, each error's detail.",
        ANYONE,
        (
            Arg("buffer", metavar="BUFFER", help="a job id, or a persistent buffer's name"),
            Arg(
                "--json",
                dest="as_json",
                flag=True,
                help="machine-readable output, all of the error detail included",
            ),
        ),
        "dacctl.cli:show",
        "Each error with the tail of its detail. Yours only, unless you are root or an admin.",
    ),
    Command(
        "drain",
        "Place no new buffers on a storage host.",
        ADMIN,
        (Arg("host", metavar="HOST"),),
        "dacctl.cli:drain",
        "The buffers already on it stay until their jobs end.",
    ),
    Command(
        "undrain",
        "Place buffers on a drained storage host again.",
        ADMIN,
        (Arg("host", metavar="HOST"),),
        "dacctl.cli:undrain",
    ),
    Command(
        "create-persistent",
        "Create a persistent buffer outside any job and wait until dacd has built it.",
        ANYONE,
        (
            Arg("--name", required=True, help="starts with a letter"),
            Arg("--capacity", required=True, type=_positive_size, help="e.g. 1TiB"),
            Arg("--pool", help="default: the config's default_pool, else the only pool"),
            Arg("--access", default="striped", help="(default: %(default)s)"),
            Arg(
                "--type",
                dest="type_",
                default="scratch",
                choices=("scratch",),
                help="(default: %(default)s)",
            ),
            Arg("--user", dest="owner_uid", type=_int_range(0), help="owner uid (root only)"),
            Arg("--group", dest="owner_gid", type=_int_range(0), help="owner gid (root only)"),
        ),
        "dacctl.cli:create_persistent",
        "What '#BB create_persistent' does. You own it; root may name another owner with "
        "--user and --group.",
    ),
    Command(
        "destroy-persistent",
        "Destroy a persistent buffer and wait until dacd has wiped it.",
        ANYONE,
        (
            Arg("name", metavar="NAME"),
            Arg(
                "--hurry",
                flag=True,
                help="as '#BB destroy_persistent hurry': skip the stage-out; a persistent "
                "buffer has none, so this changes nothing",
            ),
        ),
        "dacctl.cli:destroy_persistent",
        "Yours, or any as root; refused while a job has it attached.",
    ),
    Command(
        "forget",
        "Drop a buffer whose storage hosts are all down for good.",
        ADMIN,
        (Arg("buffer", metavar="BUFFER"),),
        "dacctl.cli:forget",
        "Its spec and claims go without a teardown, so wipe its bricks by hand.",
    ),
    Command(
        "owed",
        "What compute nodes that did not answer at a teardown still owe.",
        ADMIN,
        (Arg("--json", dest="as_json", flag=True),),
        "dacctl.cli:owed",
        "Their mounts of a filesystem that is gone. Each is unmounted once its node answers "
        "again (docs/reliability.md).",
    ),
    Command(
        "forget-node",
        "Declare a compute node gone for good: drop what it owes (dacctl owed).",
        ADMIN,
        (Arg("node", metavar="NODE"),),
        "dacctl.cli:forget_node",
        "Reinstall or reboot it before it joins again, so none of its old mounts remain.",
    ),
    Command(
        "estimate",
        "Capacity advice for a job script: the du of its stage-in sources plus a margin.",
        ANYONE,
        (
            Arg("script", metavar="SCRIPT", type=_path("file")),
            Arg(
                "--margin",
                default="0.25",
                type=_margin,
                help="added to the data, as a fraction (0.25) or a percentage (25%%) "
                "(default: %(default)s)",
            ),
            Arg(
                "--output",
                default="0",
                type=_size,
                help="output the job will write into its buffer, e.g. 100GiB",
            ),
            JSON,
        ),
        "dacctl.cli:estimate",
        "The reference architecture's rule, plus the output you expect, rounded up to the "
        "pool's bricks. The sources are measured as you, as the stage-in will read them; a "
        "path you cannot read fails the estimate (exit 1) after the figures, since it would "
        "fail the stage-in.",
    ),
    Command(
        "slurm-files",
        "Write this installation's Slurm plugin files into DIRECTORY (e.g. /etc/slurm).",
        ANYONE,
        (
            Arg("directory", metavar="DIRECTORY", type=_path("directory")),
            Arg("--force", flag=True, help="replace files that differ from dac's"),
            Arg(
                "--lua-bytecode",
                metavar="LUA",
                help="write burst_buffer.lua compiled to Lua 5.1 bytecode by the interpreter "
                "LUA (e.g. lua5.1): only for a slurmctld linking that same Lua 5.1",
            ),
        ),
        "dacctl.cli:slurm_files",
        "burst_buffer.lua, and sample burst_buffer.conf files for burst_buffer/lua and "
        "burst_buffer/datawarp (docs/slurm.md says which to use). A file that differs from "
        "dac's is kept unless --force. --lua-bytecode saves slurmctld compiling the script "
        "on every in-process hook (docs/slurm.md, The answerer); run it again after every "
        "dac upgrade.",
    ),
    Command(
        "etcd-certs",
        "Make a site's etcd certificates in DIRECTORY.",
        ANYONE,
        (
            Arg("directory", metavar="DIRECTORY", type=_path("directory")),
            Arg(
                "--member",
                dest="members",
                action="append",
                required=True,
                help="NAME=ADDRESS[,NAME-OR-ADDRESS...], once per etcd member",
            ),
            Arg("--force", flag=True, help="replace an existing CA"),
        ),
        "dacctl.cli:etcd_certs",
        "A CA, one certificate per member naming every address and name it is dialled by, "
        "and one client certificate per role (dacd, slurm, admin), without a Common Name "
        "(docs/admin.md, 'etcd certificates'). Keys 0600.",
    ),
    Command(
        "stage",
        "Stages from inside a running job: copy to or from its buffer while it computes.",
        ANYONE,
        details="Run on one of the job's nodes (docs/users.md, 'Staging from inside the "
        "job'). dac's user service checks the job is yours and runs there.",
    ),
    *(
        Command(
            f"stage {direction}",
            f"Copy SOURCE {what}, in the background; prints the stage's id.",
            ANYONE,
            (
                Arg("source", metavar="SOURCE"),
                Arg("destination", metavar="DESTINATION"),
                Arg("--directory", flag=True, help="SOURCE is a directory (default: as it is)"),
                Arg(
                    "--at-job-end",
                    flag=True,
                    help="run it with the job's #DW stage_out lines, before teardown",
                ),
                Arg(
                    "--revocable",
                    flag=True,
                    help="with --at-job-end: a later one to the same DESTINATION replaces it",
                ),
                JSON,
            ),
            f"dacctl.stage:stage_{direction}",
        )
        for direction, what in (
            ("in", "(yours) to DESTINATION in the job's buffer"),
            ("out", "(in the job's buffer) to DESTINATION (yours)"),
        )
    ),
    Command("stage list", "The job's stages.", ANYONE, (JSON,), "dacctl.stage:stage_list"),
    Command(
        "stage status",
        "One stage: state, bytes and files done, rate, time left, error.",
        ANYONE,
        (Arg("id", metavar="ID", type=_int_range(1)), JSON),
        "dacctl.stage:stage_status",
    ),
    Command(
        "stage wait",
        "Wait until the stages have ended; exit 1 when one failed.",
        ANYONE,
        (
            Arg("ids", metavar="ID", nargs="*", type=_int_range(1)),
            Arg("--all", dest="all_", flag=True, help="every stage of the job"),
            Arg("--timeout", type=float, help="give up after this many seconds"),
            JSON,
        ),
        "dacctl.stage:stage_wait",
    ),
    Command(
        "stage cancel",
        "Stop a stage: a running one is killed, a queued one never runs.",
        ANYONE,
        (Arg("id", metavar="ID", type=_int_range(1)), JSON),
        "dacctl.stage:stage_cancel",
    ),
    Command(
        "local",
        "The all-in-one local DAC: etcd, dacd servers and loop-file bricks on this machine.",
        ROOT,
    ),
    Command(
        "local up",
        "Start etcd and N storage servers; returns when they show in the pools.",
        ROOT,
        (
            WORKDIR,
            Arg("--servers", default=2, type=_int_range(1, 64), help="(default: %(default)s)"),
            Arg(
                "--bricks-per-server",
                default=4,
                type=_int_range(1, 64),
                help="(default: %(default)s)",
            ),
            Arg("--brick-size", default="1GiB", type=_size, help="(default: %(default)s)"),
            Arg(
                "--slurm-nodes",
                default=0,
                type=_int_range(0, 16),
                help="also boot a Slurm with this many nodes wired to dac (default: %(default)s)",
            ),
            Arg(
                "--slurm-plugin",
                default="lua",
                choices=("lua", "datawarp"),
                help="Slurm's burst buffer plugin (default: %(default)s)",
            ),
            Arg(
                "--slurm-release",
                default="22.05",
                choices=("22.05", "24.11", "26.05"),
                help="22.05: the host's own Slurm; 24.11 (Debian 13) and 26.05 (Debian forky) "
                "run from a Debian chroot built on first use and cached in /var/cache/dac-local "
                "(default: %(default)s)",
            ),
            Arg(
                "--etcd-release",
                default="3.4",
                choices=("3.4", "3.5", "3.6"),
                help="3.4: the host's etcd-server; 3.5: Debian 13's; 3.6: built from the Go "
                "module proxy on first use (needs Go); both cached in /var/cache/dac-local "
                "(default: %(default)s)",
            ),
            Arg(
                "--etcd-members",
                default=1,
                type=_int_range(1, 7),
                help="etcd members on loopback, one cluster (3: one may fail; odd numbers "
                "only) (default: %(default)s)",
            ),
        ),
        "dacctl.cli:local_up",
    ),
    Command(
        "local env",
        "Print the export lines a shell needs to use the local DAC.",
        ANYONE,
        (WORKDIR,),
        "dacctl.cli:local_env",
    ),
    Command(
        "local status",
        "Show the local DAC's processes, bricks and pools.",
        ROOT,
        (WORKDIR, Arg("--json", dest="as_json", flag=True)),
        "dacctl.cli:local_status",
    ),
    Command(
        "local down",
        "Stop everything `up` started here and remove its bricks.",
        ROOT,
        (WORKDIR,),
        "dacctl.cli:local_down",
    ),
    *FUNCTIONS,
)

_TABLE = Table(COMMANDS)


def command(name: str) -> Command:
    """The command of that name ("function setup" for Slurm's setup)."""
    return _TABLE.by_name[name]


def members(group: str) -> list[Command]:
    """The commands of a group ("" the top level, "local", "function"), in table order."""
    return _TABLE.members(group)


def parse(argv: list[str]) -> tuple[Command, argparse.Namespace]:
    """The command `argv` names and its arguments; Usage when refused, Exit after --help or
    --version. A Slurm function's arguments carry its name as `function`, as Cray's did."""
    if len(argv) > 1 and argv[0] == "--function":
        fast = function_words(argv[1], argv[2:])  # the answerer's own parse of Slurm's words
        if fast is not None:
            return fast
    return _TABLE.parse(argv)


def _top() -> argparse.ArgumentParser:
    return _TABLE.top()
