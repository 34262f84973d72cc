"""Every dacctl command, declared once: its name, a one-line summary, who may run it, its
arguments, and its handler as "module:function", imported only when that command runs.

dacctl parses its argv once (`parse`), with one argparse parser built from this table. Slurm's
functions are commands like any other, in the `function` group (`pools` is also a people's
command, so Slurm's have a group of their own): `dacctl function setup --token 7 …`. The form
Slurm and burst_buffer.lua use, Cray's dw_wlm_cli `dacctl --function setup --token 7 …`, is
the same command: `--function` is an option of the one parser whose action hands the rest of
the line to the named function's parser, as data-acc's dacctl makes `--function` a
subcommand. Nothing looks at argv before it is parsed. One shortcut, for the warm answerer's
sake: `--function NAME` followed only by options of that function as the table spells them,
each with its value (or a flag alone), is read from the table directly (`_function_words`),
into the namespace argparse would give; any other line goes to argparse.

Who may run what (`who`), and where it is checked:
  ANYONE  the services decide per object (a user sees their own buffers); nothing here
  ADMIN   root or the config's admin_group: daccore.services.admin checks it for every caller
          (these commands and the user service alike), `hosts` by its etcd credential
  ROOT    real and effective uid 0 (the local DAC's processes, loop devices and mounts):
          dacctl.main checks it before the handler runs
  SLURM   root or SlurmUser: dacctl.datawarp checks it before any argument is looked at, and
          answers every refusal, a usage error included, by Slurm's protocol (one line on
          stdout, exit 1)

Why argparse for all, not click for people's commands: the hooks inside slurmctld (job_process,
pools, paths) already imported argparse, and must import nothing more (docs/performance.md).
Measured on this 2-core machine (Debian 12's python3.11, `-X importtime`, five runs each):
`import click` 17-50 ms cumulative, `import argparse` 1.4-3.4 ms. A table generating both a
lean argparse parser for Slurm and click for people would keep two parsers, and a choice
between them before parsing. What the one argparse parser costs the hooks (2026-11-27, A/B in
one run, the checkout before and after, fresh processes): importing dacctl and parsing argv,
median 8.1 ms after, 9.5 ms before (min 5.5 / 6.7 ms). Only the parsers of the command run are
built (for a hook, the top level's and its function's, not the 36 commands'), and `_Parser`
checks each argument's metavar with one formatter where argparse made one per argument, asking
the terminal its size (and importing shutil, zlib, bz2 and lzma for it). So `dacctl --function
pools` imports 130 modules where it imported 136 (job_process 140, was 146; paths 138, was
144), dacctl.commands among them, click, pydantic, yaml and rich not; a whole call's median is
unchanged within the machine's noise (bench/hot_path.py --editable). People's
commands start without click's 17+ ms.
"""

from __future__ import annotations

import argparse
import functools
import sys

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Any

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

ANYONE, ADMIN, ROOT, SLURM = "anyone", "root or admin", "root", "Slurm"


class Arg:
    """One argument: argparse's `add_argument(*flags, **options)`, plus `flag=True` for a
    store_true option and `choices="module:NAME"`, looked up when the command's parser is
    built (so the table imports nothing)."""

    __slots__ = ("flags", "options")

    def __init__(self, *flags: str, **options: Any) -> None:
        self.flags, self.options = flags, options

    @property
    def dest(self) -> str:
        dest = self.options.get("dest")
        if isinstance(dest, str):
            return dest
        names = [f for f in self.flags if f.startswith("--")] or list(self.flags)
        return names[0].lstrip("-").replace("-", "_")


class Command:
    """A command: `name` ("pools", "local up", "function setup"), `summary` (one line),
    `who` (ANYONE, ADMIN, ROOT or SLURM), `args`, `handler` ("module:function", None for a
    group), `details` (the rest of its --help), `needs` (a Slurm function's arguments it
    cannot do without: Cray's protocol makes every option optional)."""

    __slots__ = ("name", "summary", "who", "args", "handler", "details", "needs")

    def __init__(
        self,
        name: str,
        summary: str,
        who: str,
        args: tuple[Arg, ...] = (),
        handler: str | None = None,
        details: str = "",
        needs: tuple[str, ...] = (),
    ) -> None:
        self.name, self.summary, self.who, self.args = name, summary, who, args
        self.handler, self.details, self.needs = handler, details, needs

    def load(self):
        """The handler, imported now."""
        assert self.handler is not None, f"{self.name} is a group"
        module, _, attr = self.handler.partition(":")
        return getattr(__import__(module, fromlist=[attr]), attr)

    def values(self, args: argparse.Namespace) -> dict:
        """The handler's keyword arguments from a parse."""
        return {a.dest: getattr(args, a.dest) for a in self.args}


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


def _margin(text: str):
    from daccore.services.estimate import parse_margin

    try:
        return parse_margin(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _int_range(low: int, high: int | None = None):
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


def _path(kind: str):
    """A path that, if it exists, must be a `kind` ("file" or "directory")."""

    def convert(text: str):
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
#: Cray's dw_wlm_cli options, as burst_buffer/datawarp passes them (short forms: its
#: create_persistent) and burst_buffer.lua (its three additions last). Every function takes
#: all of them, as dw_wlm_cli did: `needs` says which one cannot do without.
DW = (
    Arg("--token", "-t", help="the job id, or a persistent buffer's name"),
    Arg("--job", "-j", help="the job script Slurm wrote"),
    Arg("--caller", "-c"),
    Arg("--user", "-u", type=int, help="the job's uid"),
    Arg("--groupid", "--group", "-g", type=int, help="the job's gid"),
    Arg("--capacity", "-C", help="POOL:SIZE, as Slurm accounts the job's buffer"),
    Arg("--access", "-a"),
    Arg("--type", "-T"),
    Arg("--nodehostnamefile", help="the job's nodes, one a line"),
    Arg("--jobexecutionnodefile"),
    Arg("--nidlistfile"),
    Arg("--pathfile", help="where paths writes the job's DW_* variables"),
    Arg("--nodes", help="the job's nodes as Slurm lists them (burst_buffer.lua, 23.02+)"),
    Arg("--array-job", help="a job array task's array id (burst_buffer.lua, 23.02+)"),
    Arg("--hurry", flag=True, help="teardown: skip the stage-out (scancel --hurry)"),
)
#: Slurm's functions: name, summary, what each cannot do without, its handler's name in
#: dacctl/datawarp.py (which says how each runs: inside slurmctld or in slurmscriptd)
_FUNCTIONS = (
    ("pools", "The pools in DataWarp's JSON (inside slurmctld, every 30 s).", (), "pools"),
    ("show_instances", "Each buffer as a DataWarp instance (JSON).", (), "show"),
    ("show_sessions", "Each buffer as a DataWarp session (JSON).", (), "show"),
    ("show_configurations", "Each buffer as a DataWarp configuration (JSON).", (), "show"),
    ("job_process", "Refuse a job script's directives at submission.", ("job",), "job_process"),
    (
        "setup",
        "Allocate the job's buffer; return once dacd has built it.",
        ("token", "user", "groupid", "job"),
        "setup",
    ),
    ("real_size", "The job buffer's allocated bytes (JSON).", ("token",), "real_size"),
    ("data_in", "Stage the job's stage_in lines in; return when done.", ("token",), "stage"),
    ("paths", "Write the job's DW_* variables to --pathfile.", ("token", "pathfile"), "paths"),
    ("pre_run", "Mount the job's buffers on its nodes.", ("token",), "pre_run"),
    ("post_run", "Unmount the job's buffers from its nodes.", ("token",), "post_run"),
    ("data_out", "Stage the job's stage_out lines out; return when done.", ("token",), "stage"),
    (
        "teardown",
        "Delete the job's buffer, or the persistent buffer named (destroy_persistent).",
        ("token",),
        "teardown",
    ),
    (
        "create_persistent",
        "Create a persistent buffer (#BB create_persistent).",
        ("token", "user", "capacity"),
        "create_persistent",
    ),
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
        "user-service",
        "Run dac's user service (as SlurmUser, under systemd).",
        ANYONE,
        (),
        "dacctl.cli:user_service",
        "daccore/share/packaging/dac-users.service: it answers users' status, pools, "
        "buffers, show, create-persistent and destroy-persistent for the uid their munge "
        "credential proves, on the config's user_service (host:port).",
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
    Command(
        "function",
        "Slurm's calls (Cray's dw_wlm_cli protocol): also `dacctl --function NAME …`.",
        SLURM,
        details="Root and SlurmUser only (docs/slurm.md). Success: exit 0, the answer on "
        "stdout. Failure: exit 1, one line on stdout, which Slurm shows the job's owner.",
    ),
    *(
        Command(f"function {name}", summary, SLURM, DW, f"dacctl.datawarp:{handler}", "", needs)
        for name, summary, needs, handler in _FUNCTIONS
    ),
)

_BY_NAME = {c.name: c for c in COMMANDS}


def command(name: str) -> Command:
    """The command of that name ("function setup" for Slurm's setup)."""
    return _BY_NAME[name]


def members(group: str) -> list[Command]:
    """The commands of a group ("" the top level, "local", "function"), in table order."""
    depth = len(group.split()) + 1 if group else 1
    prefix = group + " " if group else ""
    return [c for c in COMMANDS if c.name.startswith(prefix) and len(c.name.split()) == depth]


# -- the parser --------------------------------------------------------------------------------


class Usage(Exception):
    """A command line refused: `where` (its command's path), the one-line `message`, and the
    `command` it had reached (None before any), whose `who` says how to answer."""

    def __init__(self, where: str, message: str, reached: Command | None = None) -> None:
        super().__init__(message)
        self.where, self.message, self.command = where, message, reached


class Exit(Exception):
    """--help or --version printed what it had to: exit with `status`."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """Refusals raise Usage; --help and --version, Exit. While it is being built, argparse's
    check of each argument's metavar uses one formatter (`built()` ends that), not a new one
    per argument that asks the terminal its size: 0.1-0.3 ms a parser, on the hooks' path."""

    def __init__(self, **options) -> None:
        self._checker: argparse.HelpFormatter | None = argparse.HelpFormatter(
            options["prog"], width=80
        )
        super().__init__(**options)

    def _get_formatter(self) -> argparse.HelpFormatter:
        return self._checker or super()._get_formatter()

    def built(self) -> _Parser:
        self._checker = None
        return self

    def error(self, message: str):
        raise Usage(self.prog, message)

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            sys.stderr.write(message)
        raise Exit(status)


class _Group(_Parser):
    """A group's parser ("" the top level): its --help lists its commands from the table."""

    def __init__(self, prog: str, description: str, group: str = "") -> None:
        super().__init__(prog=prog, description=description)
        self.group = group

    def format_help(self) -> str:
        names = [(c.name.split()[-1], c) for c in members(self.group)]
        width = max(len(name) for name, _ in names)
        rows = "".join(f"  {name:{width}}  {c.who:13}  {c.summary}\n" for name, c in names)
        return (
            f"{super().format_help()}\ncommands:\n  {'':{width}}  who may run it\n{rows}\n"
            f"`{self.prog} COMMAND --help` gives a command's arguments.\n"
        )


class _Command(argparse.Action):
    """COMMAND [ARGS …], and `--function NAME [ARGS …]`: the command named (of `group`) parses
    the rest of the line with its own parser, built now."""

    def __init__(self, option_strings, dest, group: str = "", **options) -> None:
        nargs = argparse.REMAINDER if option_strings else argparse.PARSER
        super().__init__(option_strings, dest, nargs=nargs, **options)
        self.group, self.required = group, False

    def __call__(self, parser, namespace, values, option_string=None):
        reached = namespace.command
        if reached is not None and reached.name != self.group:  # `--function=NAME` took none
            raise Usage(
                parser.prog,
                f"unrecognized arguments: {' '.join(values)} (write `--function NAME ARGS`)",
                reached,
            )
        group = _BY_NAME.get(self.group)
        namespace.command = group  # a refusal from here on is answered as its commands' are
        if not values:
            raise Usage(parser.prog, f"{option_string} needs a function name", group)
        name = f"{self.group} {values[0]}".strip()
        found = _BY_NAME.get(name)
        if found is None or len(name.split()) != len(self.group.split()) + 1:
            choices = ", ".join(c.name.split()[-1] for c in members(self.group))
            what = "function" if self.group == "function" else "command"
            raise Usage(parser.prog, f"no such {what} '{values[0]}' (choose from {choices})", group)
        namespace.command = found
        try:
            _parser_of(found).parse_args(values[1:], namespace)
        except Usage as e:
            e.command = found
            raise


@functools.cache  # the answerer (dacservice/answerer.py) parses every call
def _parser_of(cmd: Command) -> argparse.ArgumentParser:
    about = " ".join(filter(None, (cmd.summary, f"Who: {cmd.who}.", cmd.details)))
    # dw_wlm_cli's options abbreviated, as before; people's exactly, as click took them
    abbreviated = cmd.who == SLURM
    if cmd.handler is None:
        p: _Parser = _Group(prog=f"dacctl {cmd.name}", description=about, group=cmd.name)
        p.add_argument("command", action=_Command, group=cmd.name, metavar="COMMAND", help=_BELOW)
    else:
        p = _Parser(prog=f"dacctl {cmd.name}", description=about, allow_abbrev=abbreviated)
    for a in cmd.args:
        options = dict(a.options)
        if options.pop("flag", False):
            options["action"] = "store_true"
        choices = options.get("choices")
        if isinstance(choices, str):
            module, _, attr = choices.partition(":")
            options["choices"] = choices = getattr(__import__(module, fromlist=[attr]), attr)
        if choices is not None and "metavar" not in options:
            options["metavar"] = "[" + "|".join(choices) + "]"
        p.add_argument(*a.flags, **options)
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return p.built()


_BELOW = "one of the commands below, and its arguments"


class _Version(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        import daccore

        print(f"dac, version {daccore.__version__}")
        parser.exit()


@functools.cache
def _top() -> argparse.ArgumentParser:
    p = _Group(
        prog="dacctl",
        description="dac: burst buffers for Slurm. Add --debug to any command for tracebacks.",
    )
    p.add_argument("command", action=_Command, metavar="COMMAND", help=_BELOW)
    p.add_argument(
        "--function",
        action=_Command,
        group="function",
        metavar="NAME ...",
        help="Slurm's call NAME (dw_wlm_cli): the command `function NAME`",
    )
    p.add_argument("--debug", action="store_true", help="a traceback with an error")
    p.add_argument("--version", action=_Version, nargs=0, help="print dac's version")
    return p.built()


def parse(argv: list[str]) -> tuple[Command, argparse.Namespace]:
    """The command `argv` names and its arguments; Usage when refused, Exit after --help or
    --version. A Slurm function's arguments carry its name as `function`, as Cray's did."""
    if len(argv) > 1 and argv[0] == "--function":
        fast = _function_words(argv[1], argv[2:])
        if fast is not None:
            return fast
    args = argparse.Namespace(command=None)
    try:
        _top().parse_args(argv, args)
        found = args.command
        if found is None or found.handler is None:
            where = f"dacctl {found.name}" if found else "dacctl"
            raise Usage(where, "a command is required")
    except Usage as e:
        e.command = e.command or args.command
        raise
    if found.who == SLURM:
        args.function = found.name.split()[-1]
    return found, args


# -- Slurm's functions without argparse: the answerer parses every call ------------------------


@functools.cache
def _function_table(name: str) -> tuple[Command, argparse.Namespace, dict] | None:
    """For `--function name`: its command, the namespace argparse gives it without arguments
    (every default), and each option string of its arguments (the table's, and --debug) as
    (dest, flag, type); None when the name is not a Slurm function or an argument is more than
    `--option VALUE` or a flag."""
    found = _BY_NAME.get(f"function {name}")
    if found is None or found.who != SLURM or found.handler is None:
        return None
    args = (*found.args, Arg("--debug", flag=True))
    options: dict[str, tuple[str, bool, Any]] = {}
    for a in args:
        if set(a.options) - {"help", "flag", "type", "dest"}:
            return None
        if not all(f.startswith("-") for f in a.flags):
            return None
        for flag in a.flags:
            options[flag] = (a.dest, bool(a.options.get("flag")), a.options.get("type"))
    empty = argparse.Namespace(command=None)
    _top().parse_args(["--function", name], empty)
    empty.function = name
    return found, empty, options


def _function_words(name: str, words: list[str]) -> tuple[Command, argparse.Namespace] | None:
    """What `parse(["--function", name, *words])` gives, for the plain form burst_buffer.lua
    and burst_buffer/datawarp write (each option whole, as the table spells it, its value the
    next word, not starting with "-"); None for anything else (an abbreviation, `--opt=v`, a
    value argparse's type refuses, --help, a stray word), which argparse parses, and refuses
    in its own words. tests/unit/dacctl/test_function_words.py holds the two to agreement."""
    table = _function_table(name)
    if table is None:
        return None
    found, empty, options = table
    values: dict[str, object] = {}
    i, n = 0, len(words)
    while i < n:
        option = options.get(words[i])
        if option is None:
            return None
        dest, flag, convert = option
        if flag:
            values[dest] = True
            i += 1
            continue
        if i + 1 >= n or words[i + 1].startswith("-"):
            return None
        value: object = words[i + 1]
        if convert is not None:
            try:
                value = convert(value)
            except (TypeError, ValueError, argparse.ArgumentTypeError):
                return None
        values[dest] = value
        i += 2
    args = argparse.Namespace(**vars(empty))
    for dest, value in values.items():
        setattr(args, dest, value)
    return found, args
