"""Two command-line grammars the stand-ins reproduce: Go's go-flags and C's getopt_long.

The DAOS admin and user tools (dmg, daos) parse their argv with github.com/jessevdk/go-flags
v1.5.0 (parser.go, option.go, optstyle_other.go); dfuse and fusermount3 use glibc's
getopt_long. A stand-in that accepted what those parsers refuse would let a playbook pass
here and fail on a real site, so both are reproduced with their error wording:

go-flags (flags.Default options, the way dmg and daos build their parser)
    options anywhere after the command that owns them (a parent's options stay valid under
    its subcommands); ``--name=value``, ``--name value``, ``-xvalue``, ``-x value``,
    ``-x=value``, bool clusters ``-fr``; ``--`` ends the options; a value that looks like an
    option is refused; unknown commands get the "did you mean" hint.
getopt_long (GNU)
    argv is permuted (options may follow operands); unambiguous prefixes of long options;
    ``--`` ends the options; errors in glibc's wording, on stderr.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = [
    "Flag",
    "Arg",
    "Command",
    "FlagsError",
    "Parsed",
    "parse_goflags",
    "GetoptError",
    "getopt_long",
]


class FlagsError(Exception):
    """A go-flags parse error; str() is the message the Go tool prints after 'ERROR: dmg: '."""


@dataclass(frozen=True)
class Flag:
    """One go-flags option. ``go_type`` None means a bool flag (takes no argument)."""

    long: str
    short: str = ""
    go_type: str | None = None
    convert: Callable[[str], object] = str
    required: bool = False

    def __str__(self) -> str:  # go-flags Option.String()
        if self.short and self.long:
            return f"-{self.short}, --{self.long}"
        return f"-{self.short}" if self.short else f"--{self.long}"


@dataclass(frozen=True)
class Arg:
    """A positional argument; ``convert`` raises ValueError with go-flags' raw message."""

    name: str
    required: bool = False
    convert: Callable[[str], object] = str


@dataclass
class Command:
    name: str
    flags: list[Flag] = field(default_factory=list)
    args: list[Arg] = field(default_factory=list)
    commands: dict[str, "Command"] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    opaque: bool = False  # a real command not modelled: its argv is not parsed, only kept

    def sub(self, *commands: "Command") -> "Command":
        for c in commands:
            for name in (c.name, *c.aliases):
                self.commands[name] = c
        return self


@dataclass
class Parsed:
    path: list[str]  # command names from the root, e.g. ["pool", "create"]
    # values as each Flag's and Arg's `convert` makes them: their types are the spec's
    opts: dict[str, Any]  # by long name; bool flags present map to True
    args: dict[str, Any]  # by positional name
    rest: list[str]  # left-over operands (NoArgsCmd refuses them)
    help: bool = False


HELP = Flag("help", "h")


def _is_option(a: str) -> bool:  # optstyle_other.go argumentIsOption
    return (len(a) > 1 and a[0] == "-" and a[1] != "-") or (
        len(a) > 2 and a.startswith("--") and a[2] != "-"
    )


def _closest(word: str, choices: list[str]) -> tuple[str, int]:
    def distance(a: str, b: str) -> int:
        row = list(range(len(b) + 1))
        for i, ca in enumerate(a, 1):
            prev, row[0] = row[0], i
            for j, cb in enumerate(b, 1):
                prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        return row[-1]

    return min(((c, distance(word, c)) for c in choices), key=lambda t: t[1], default=("", 0))


def _unknown_command(cmd: Command, word: str | None) -> FlagsError:
    names = sorted({c.name for c in cmd.commands.values()})
    listing = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
    if word is None:
        return FlagsError(f"Please specify one command of: {listing}")
    choice, dist = _closest(word, names)
    if choice and dist / len(choice) < 0.5:
        return FlagsError(f"Unknown command `{word}', did you mean `{choice}'?")
    return FlagsError(f"Unknown command `{word}'. Please specify one command of: {listing}")


def parse_goflags(root: Command, argv: list[str]) -> Parsed:
    """Parse argv the way go-flags does for a tree of commands; raise FlagsError."""
    cmd = root
    path: list[str] = []
    lookup: dict[str, Flag] = {}
    out = Parsed(path, {}, {}, [])

    def enter(c: Command) -> list[Arg]:
        for f in (*c.flags, HELP):
            lookup["--" + f.long] = f
            if f.short:
                lookup["-" + f.short] = f
        return list(c.args)

    def take(arg: str, positional: list[Arg]) -> None:
        if positional:
            p = positional.pop(0)
            try:
                out.args[p.name] = p.convert(arg)
            except ValueError as e:
                raise FlagsError(str(e)) from None
        else:
            out.rest.append(arg)

    def set_flag(f: Flag, value: str | None, queue: list[str]) -> None:
        if f.go_type is None:
            if value is not None:
                raise FlagsError(f"bool flag `{f}' cannot have an argument")
            out.opts[f.long] = True
            return
        if value is None:
            if not queue:
                raise FlagsError(f"expected argument for flag `{f}'")
            value = queue.pop(0)
            if _is_option(value):
                raise FlagsError(f"expected argument for flag `{f}', but got option `{value}'")
        try:
            out.opts[f.long] = f.convert(value)
        except ValueError as e:
            raise FlagsError(
                f"invalid argument for flag `{f}' (expected {f.go_type}): {e}"
            ) from None

    positional = enter(cmd)
    queue = list(argv)
    while queue:
        a = queue.pop(0)
        if a == "--":
            for rest in queue:
                take(rest, positional)
            break
        if not _is_option(a):
            if not positional and cmd.commands and not out.rest:
                if a not in cmd.commands:
                    raise _unknown_command(cmd, a)
                cmd = cmd.commands[a]
                path.append(cmd.name)
                positional = enter(cmd)
                if cmd.opaque:
                    out.rest += queue
                    return out
            else:
                take(a, positional)
            continue
        if a.startswith("--"):
            name, eq, value = a[2:].partition("=")
            f = lookup.get("--" + name)
            if f is None:
                raise FlagsError(f"unknown flag `{name}'")
            set_flag(f, value if eq else None, queue)
            continue
        body, attached = a[1:], None
        if len(body) > 1 and body[1] == "=":  # -x=value
            body, attached = body[0], body[2:]
        first = lookup.get("-" + body[0])
        if attached is None and len(body) > 1 and first and first.go_type is not None:
            set_flag(first, body[1:], queue)  # -xvalue: only the first letter may
            continue  # take the rest as its value
        for i, ch in enumerate(body):
            f = lookup.get("-" + ch)
            if f is None:
                raise FlagsError(f"unknown flag `{ch}'")
            last = i + 1 == len(body)
            set_flag(f, attached if last else None, queue if last else [])
    if out.opts.pop("help", False):
        out.help = True
        return out
    missing = [
        f
        for c in [root, *_chain(root, path)]
        for f in c.flags
        if f.required and f.long not in out.opts
    ]
    if missing:
        names = sorted(f"`{f}'" for f in missing)
        raise FlagsError(
            f"the required flag {names[0]} was not specified"
            if len(names) == 1
            else f"the required flags {', '.join(names[:-1])} and {names[-1]} were not specified"
        )
    required = [p for p in positional if p.required]
    if required:
        names = [f"`{p.name}`" for p in required]
        raise FlagsError(
            f"the required argument {names[0]} was not provided"
            if len(names) == 1
            else f"the required arguments {', '.join(names[:-1])} and {names[-1]} were not provided"
        )
    if cmd.commands:
        raise _unknown_command(cmd, out.rest[0] if out.rest else None)
    return out


def _chain(root: Command, path: list[str]) -> list[Command]:
    cmds, c = [], root
    for name in path:
        c = c.commands[name]
        cmds.append(c)
    return cmds


class GetoptError(Exception):
    """getopt_long's complaint (already prefixed with the program name), as glibc prints it."""


def getopt_long(
    prog: str, argv: list[str], shortopts: str, longopts: dict[str, tuple[bool, str]]
) -> tuple[list[tuple[str, str | None]], list[str]]:
    """GNU getopt_long: returns ([(option char, value)], operands) or raises GetoptError.

    ``longopts`` maps a long name to (takes an argument, the option char it returns).
    """
    takes = {c: shortopts[i + 1 : i + 2] == ":" for i, c in enumerate(shortopts) if c != ":"}
    opts: list[tuple[str, str | None]] = []
    operands: list[str] = []
    queue = list(argv)
    while queue:
        a = queue.pop(0)
        if a == "--":
            operands += queue
            break
        if a.startswith("--"):
            name, eq, value = a[2:].partition("=")
            matches = [n for n in longopts if n == name] or [
                n for n in longopts if n.startswith(name)
            ]
            if not matches:
                raise GetoptError(f"{prog}: unrecognized option '{a.split('=')[0]}'")
            if len(matches) > 1 and len({longopts[m] for m in matches}) > 1:
                raise GetoptError(
                    f"{prog}: option '{a.split('=')[0]}' is ambiguous; "
                    "possibilities: " + " ".join(f"'--{m}'" for m in matches)
                )
            full = matches[0]
            has_arg, char = longopts[full]
            if not has_arg and eq:
                raise GetoptError(f"{prog}: option '--{full}' doesn't allow an argument")
            if has_arg and not eq:
                if not queue:
                    raise GetoptError(f"{prog}: option '--{full}' requires an argument")
                value = queue.pop(0)
            opts.append((char, value if has_arg else None))
        elif a.startswith("-") and a != "-":
            body = a[1:]
            for i, ch in enumerate(body):
                if ch not in takes:
                    raise GetoptError(f"{prog}: invalid option -- '{ch}'")
                if not takes[ch]:
                    opts.append((ch, None))
                    continue
                value = body[i + 1 :]
                if not value:
                    if not queue:
                        raise GetoptError(f"{prog}: option requires an argument -- '{ch}'")
                    value = queue.pop(0)
                opts.append((ch, value))
                break
        else:
            operands.append(a)  # GNU getopt permutes: operands may come before options
    return opts, operands
