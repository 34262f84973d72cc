"""The row type of dacctl's one command table (`Command`, `Arg`), the parser built from rows
(`Table`), and the table's Slurm rows: Cray's dw_wlm_cli functions, with how each runs.

dacctl/commands.py holds the table: people's rows, then Slurm's (`FUNCTIONS`), declared here
because the answerer (dacservice/answerer/answers.py) answers three of them with the very parse
and the very columns of `dacctl --function`, and a process imports daccore, never dacctl. So each
function is declared once: its name, summary, the arguments it cannot do without (`needs`),
its handler, and the columns the answer reads (daccore/services/slurm_answer.py):

  hot        runs inside slurmctld, under its locks (job_process, pools, paths): the lean path,
             etcd's retries capped at the hot timeout; the answerer answers these alone
  rides_out  a call for a job's buffer, run in slurmscriptd: runs again from the start while
             etcd stays out of reach, for restart_grace seconds
  named      its --token may be a persistent buffer's name, not only a job id
  stages     the script's lines it carries out (stage_in, stage_out): with none in the
             buffer's request, and every host of it alive, it answers on the lean path

`parse_function` parses a line naming one of Slurm's functions as dacctl's `parse` does: the
plain form burst_buffer.lua and burst_buffer/datawarp write, `--function NAME` followed only by
options of that function as the table spells them, each with its value (or a flag alone), from
the table directly (`function_words`), into the namespace argparse would give; any other line
by a Table of Slurm's rows alone, the same parsers as dacctl's whole table builds.
tests/unit/dacctl/test_function_words.py holds the two to agreement.

Imports argparse and nothing else of weight: job_process, pools and paths import it inside
slurmctld (docs/performance.md).
"""

from __future__ import annotations

import argparse
import functools
import sys

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn

__all__ = [
    "ANYONE",
    "ADMIN",
    "ROOT",
    "SLURM",
    "Arg",
    "Command",
    "Usage",
    "Exit",
    "Parser",
    "Table",
    "parser_of",
    "DW",
    "FUNCTIONS",
    "slurm_function",
    "parse_function",
    "function_words",
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
    group), `details` (the rest of its --help), and a Slurm function's columns: `needs` (the
    arguments it cannot do without: Cray's protocol makes every option optional), `hot`,
    `rides_out`, `named` and `stages` (the module's docstring)."""

    __slots__ = (
        "name",
        "summary",
        "who",
        "args",
        "handler",
        "details",
        "needs",
        "hot",
        "rides_out",
        "named",
        "stages",
    )

    def __init__(
        self,
        name: str,
        summary: str,
        who: str,
        args: tuple[Arg, ...] = (),
        handler: str | None = None,
        details: str = "",
        needs: tuple[str, ...] = (),
        hot: bool = False,
        rides_out: bool = False,
        named: bool = False,
        stages: str = "",
    ) -> None:
        self.name, self.summary, self.who, self.args = name, summary, who, args
        self.handler, self.details, self.needs = handler, details, needs
        self.hot, self.rides_out, self.named, self.stages = hot, rides_out, named, stages

    def load(self) -> Callable[..., Any]:
        """The handler, imported now."""
        assert self.handler is not None, f"{self.name} is a group"
        module, _, attr = self.handler.partition(":")
        handler: Callable[..., Any] = getattr(__import__(module, fromlist=[attr]), attr)
        return handler

    def values(self, args: argparse.Namespace) -> dict[str, Any]:
        """The handler's keyword arguments from a parse."""
        return {a.dest: getattr(args, a.dest) for a in self.args}


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


class Parser(argparse.ArgumentParser):
    """Refusals raise Usage; --help and --version, Exit. While it is being built, argparse's
    check of each argument's metavar uses one formatter (`built()` ends that), not a new one
    per argument that asks the terminal its size: 0.1-0.3 ms a parser, on the hooks' path."""

    def __init__(self, **options: Any) -> None:
        self._checker: argparse.HelpFormatter | None = argparse.HelpFormatter(
            options["prog"], width=80
        )
        super().__init__(**options)

    def _get_formatter(self) -> argparse.HelpFormatter:
        return self._checker or super()._get_formatter()

    def built(self) -> Parser:
        self._checker = None
        return self

    def error(self, message: str) -> NoReturn:
        raise Usage(self.prog, message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise Exit(status)


@functools.cache  # the answerer parses every call
def parser_of(cmd: Command) -> argparse.ArgumentParser:
    """The parser of a command that runs (a group's is its table's): its arguments, and
    --debug."""
    assert cmd.handler is not None, f"{cmd.name} is a group"
    about = " ".join(filter(None, (cmd.summary, f"Who: {cmd.who}.", cmd.details)))
    # dw_wlm_cli's options abbreviated, as before; people's exactly, as click took them
    p = Parser(prog=f"dacctl {cmd.name}", description=about, allow_abbrev=cmd.who == SLURM)
    _add_arguments(p, cmd.args)
    return p.built()


def _add_arguments(p: argparse.ArgumentParser, args: tuple[Arg, ...]) -> None:
    for a in args:
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


class Table:
    """Rows of commands and the one parser built from them (`parse`): dacctl's whole table
    (dacctl/commands.py), and Slurm's rows alone (`_SLURM`), which parse `--function NAME …`
    with the very parsers of dacctl's, the answerer having no dacctl to import. Only the
    parsers of the command run are built (for a hook, the top level's and its function's)."""

    def __init__(self, rows: tuple[Command, ...]) -> None:
        self.rows = rows
        self.by_name = {c.name: c for c in rows}
        self._parsers: dict[str, argparse.ArgumentParser] = {}

    def members(self, group: str) -> list[Command]:
        """The commands of a group ("" the top level, "local", "function"), in table order."""
        depth = len(group.split()) + 1 if group else 1
        prefix = group + " " if group else ""
        return [c for c in self.rows if c.name.startswith(prefix) and len(c.name.split()) == depth]

    def parser_of(self, cmd: Command) -> argparse.ArgumentParser:
        if cmd.handler is not None:
            return parser_of(cmd)
        p = self._parsers.get(cmd.name)
        if p is None:
            about = " ".join(filter(None, (cmd.summary, f"Who: {cmd.who}.", cmd.details)))
            group = _Group(self, prog=f"dacctl {cmd.name}", description=about, group=cmd.name)
            group.add_argument(
                "command",
                action=_Command,
                table=self,
                group=cmd.name,
                metavar="COMMAND",
                help=_BELOW,
            )
            _add_arguments(group, cmd.args)
            p = self._parsers[cmd.name] = group.built()
        return p

    def top(self) -> argparse.ArgumentParser:
        p = self._parsers.get("")
        if p is None:
            top = _Group(
                self,
                prog="dacctl",
                description="dac: burst buffers for Slurm. Add --debug to any command for "
                "tracebacks.",
            )
            top.add_argument("command", action=_Command, table=self, metavar="COMMAND", help=_BELOW)
            top.add_argument(
                "--function",
                action=_Command,
                table=self,
                group="function",
                metavar="NAME ...",
                help="Slurm's call NAME (dw_wlm_cli): the command `function NAME`",
            )
            top.add_argument("--debug", action="store_true", help="a traceback with an error")
            top.add_argument(  # no `version` in a parse
                "--version",
                action=_Version,
                nargs=0,
                default=argparse.SUPPRESS,
                help="print dac's version",
            )
            p = self._parsers[""] = top.built()
        return p

    def parse(self, argv: list[str]) -> tuple[Command, argparse.Namespace]:
        """The command `argv` names and its arguments, by argparse; Usage when refused, Exit
        after --help or --version. A Slurm function's arguments carry its name as `function`,
        as Cray's did."""
        args = argparse.Namespace(command=None)
        try:
            self.top().parse_args(argv, args)
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


_BELOW = "one of the commands below, and its arguments"


class _Group(Parser):
    """A group's parser ("" the top level): its --help lists its commands from the table."""

    def __init__(self, table: Table, prog: str, description: str, group: str = "") -> None:
        super().__init__(prog=prog, description=description)
        self.table, self.group = table, group

    def format_help(self) -> str:
        names = [(c.name.split()[-1], c) for c in self.table.members(self.group)]
        width = max(len(name) for name, _ in names)
        rows = "".join(f"  {name:{width}}  {c.who:13}  {c.summary}\n" for name, c in names)
        return (
            f"{super().format_help()}\ncommands:\n  {'':{width}}  who may run it\n{rows}\n"
            f"`{self.prog} COMMAND --help` gives a command's arguments.\n"
        )


class _Command(argparse.Action):
    """COMMAND [ARGS …], and `--function NAME [ARGS …]`: the command named (of `group`) parses
    the rest of the line with its own parser, built now."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        table: Table,
        group: str = "",
        **options: Any,
    ) -> None:
        nargs = argparse.REMAINDER if option_strings else argparse.PARSER
        super().__init__(option_strings, dest, nargs=nargs, **options)
        self.table, self.group, self.required = table, group, False

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, list)  # REMAINDER's and PARSER's: the words
        reached = namespace.command
        if reached is not None and reached.name != self.group:  # `--function=NAME` took none
            raise Usage(
                parser.prog,
                f"unrecognized arguments: {' '.join(values)} (write `--function NAME ARGS`)",
                reached,
            )
        group = self.table.by_name.get(self.group)
        namespace.command = group  # a refusal from here on is answered as its commands' are
        if not values:
            raise Usage(parser.prog, f"{option_string} needs a function name", group)
        name = f"{self.group} {values[0]}".strip()
        found = self.table.by_name.get(name)
        if found is None or len(name.split()) != len(self.group.split()) + 1:
            choices = ", ".join(c.name.split()[-1] for c in self.table.members(self.group))
            what = "function" if self.group == "function" else "command"
            raise Usage(parser.prog, f"no such {what} '{values[0]}' (choose from {choices})", group)
        namespace.command = found
        try:
            self.table.parser_of(found).parse_args(values[1:], namespace)
        except Usage as e:
            e.command = found
            raise


class _Version(argparse.Action):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        import daccore

        print(f"dac, version {daccore.__version__}")
        parser.exit()


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

_ANSWERS = "daccore.services.slurm_functions:"
_STEPS = "daccore.services.slurm_steps:"


def _function(name: str, summary: str, handler: str, **columns: Any) -> Command:
    return Command(f"function {name}", summary, SLURM, DW, handler, **columns)


#: Slurm's functions, the table's last rows: the group, then each function
FUNCTIONS: tuple[Command, ...] = (
    Command(
        "function",
        "Slurm's calls (Cray's dw_wlm_cli protocol): also `dacctl --function NAME …`.",
        SLURM,
        details="Root and SlurmUser only (docs/slurm.md). Success: exit 0, the answer on "
        "stdout. Failure: exit 1, one line on stdout, which Slurm shows the job's owner.",
    ),
    _function(
        "pools",
        "The pools in DataWarp's JSON (inside slurmctld, every 30 s).",
        _ANSWERS + "pools",
        hot=True,
    ),
    _function("show_instances", "Each buffer as a DataWarp instance (JSON).", _ANSWERS + "show"),
    _function("show_sessions", "Each buffer as a DataWarp session (JSON).", _ANSWERS + "show"),
    _function(
        "show_configurations", "Each buffer as a DataWarp configuration (JSON).", _ANSWERS + "show"
    ),
    _function(
        "job_process",
        "Refuse a job script's directives at submission.",
        _ANSWERS + "job_process",
        needs=("job",),
        hot=True,
    ),
    _function(
        "setup",
        "Allocate the job's buffer; return once dacd has built it.",
        _STEPS + "setup",
        needs=("token", "user", "groupid", "job"),
        rides_out=True,
    ),
    _function(
        "real_size",
        "The job buffer's allocated bytes (JSON).",
        _ANSWERS + "real_size",
        needs=("token",),
    ),
    _function(
        "data_in",
        "Stage the job's stage_in lines in; return when done.",
        _STEPS + "stage",
        needs=("token",),
        rides_out=True,
        stages="stage_in",
    ),
    _function(
        "paths",
        "Write the job's DW_* variables to --pathfile.",
        _ANSWERS + "paths",
        needs=("token", "pathfile"),
        hot=True,
    ),
    _function(
        "pre_run",
        "Mount the job's buffers on its nodes.",
        _STEPS + "pre_run",
        needs=("token",),
        rides_out=True,
    ),
    _function(
        "post_run",
        "Unmount the job's buffers from its nodes.",
        _STEPS + "post_run",
        needs=("token",),
        rides_out=True,
    ),
    _function(
        "data_out",
        "Stage the job's stage_out lines out; return when done.",
        _STEPS + "stage",
        needs=("token",),
        rides_out=True,
        stages="stage_out",
    ),
    _function(
        "teardown",
        "Delete the job's buffer, or the persistent buffer named (destroy_persistent).",
        _STEPS + "teardown",
        needs=("token",),
        rides_out=True,
        named=True,
    ),
    _function(
        "create_persistent",
        "Create a persistent buffer (#BB create_persistent).",
        _STEPS + "create_persistent",
        needs=("token", "user", "capacity"),
        named=True,
    ),
)

_BY_FUNCTION = {c.name.split()[-1]: c for c in FUNCTIONS if c.handler is not None}
#: Slurm's rows alone, the answerer's table
_SLURM = Table(FUNCTIONS)


def slurm_function(name: str) -> Command | None:
    """Slurm's function `name`'s row, None when there is none."""
    return _BY_FUNCTION.get(name)


def parse_function(argv: list[str]) -> tuple[Command, argparse.Namespace]:
    """What dacctl parses `argv` to (dacctl/commands.py `parse`) when it names one of Slurm's
    functions: the plain form of `--function NAME …` from the table directly
    (`function_words`), any other line by argparse over Slurm's rows alone; Usage when refused
    (a line that names no function too), Exit after --help."""
    if len(argv) > 1 and argv[0] == "--function":
        fast = function_words(argv[1], argv[2:])
        if fast is not None:
            return fast
    return _SLURM.parse(argv)


@functools.cache
def _function_table(
    name: str,
) -> tuple[Command, argparse.Namespace, dict[str, tuple[str, bool, Any]]] | None:
    """For `--function name`: its row, the namespace argparse gives it without arguments
    (every default), and each option string of its arguments (the table's, and --debug) as
    (dest, flag, type); None when the name is not a Slurm function or an argument is more
    than `--option VALUE` or a flag."""
    found = _BY_FUNCTION.get(name)
    if found is None:
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
    _SLURM.top().parse_args(["--function", name], empty)
    empty.function = name
    return found, empty, options


def function_words(name: str, words: list[str]) -> tuple[Command, argparse.Namespace] | None:
    """What `Table.parse(["--function", name, *words])` gives, for the plain form
    burst_buffer.lua and burst_buffer/datawarp write (each option whole, as the table spells
    it, its value the next word, not starting with "-"); None for anything else (an
    abbreviation, `--opt=v`, a value argparse's type refuses, --help, a stray word), which
    argparse parses, and refuses in its own words."""
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
