"""GNU getopt_long, as the real tools parse their argv, with glibc's complaints.

The stand-ins must accept exactly what the real tools accept, so option parsing follows glibc's
getopt_long rather than Python's getopt: operands and options may be interleaved (GNU
permutation), a long option may be abbreviated to any unambiguous prefix, short options cluster
(`-af`), a short option's argument may be glued on (`-c4`), and an optional argument (`::` in C)
is only taken when glued on. The messages are glibc's, without the program-name prefix.

A spec entry names one option: its short letter and/or long names separated by `|`, followed by
`=` when it takes an argument or `=?` when the argument is optional. The first long name is the
canonical one the caller sees (or the letter, if there is no long name)::

    parse(["--fsname=fs1", "-r", "/dev/sdb"], ["L|fsname=", "r|reformat"])
    -> ([("fsname", "fs1"), ("reformat", None)], ["/dev/sdb"])
"""

from __future__ import annotations

__all__ = ["OptionError", "parse"]


class OptionError(Exception):
    """A usage error, worded as glibc words it (the caller adds the program name); `found`:
    the options (and, in order, operands) parsed before it."""

    found: list[tuple[str, str | None]] = []


def _table(spec: list[str]) -> tuple[dict, dict]:
    shorts: dict[str, tuple[str, str | None]] = {}
    longs: dict[str, tuple[str, str | None]] = {}
    for entry in spec:
        kind = "optional" if entry.endswith("=?") else "required" if entry.endswith("=") else None
        names = entry.rstrip("?").rstrip("=").split("|")
        canonical = next((n for n in names if len(n) > 1), names[0])
        for name in names:
            (shorts if len(name) == 1 else longs)[name] = (canonical, kind)
    return shorts, longs


def _long(longs: dict, name: str, whole: str) -> tuple[str, str | None, str]:
    if name in longs:
        return (*longs[name], name)
    matches = sorted(n for n in longs if n.startswith(name))
    if not matches:
        raise OptionError(f"unrecognized option '{whole}'")
    # glibc only calls a prefix ambiguous when the candidates really differ
    if len({longs[n] for n in matches}) > 1:
        listed = " ".join(f"'--{n}'" for n in matches)
        raise OptionError(f"option '--{name}' is ambiguous; possibilities: {listed}")
    return (*longs[matches[0]], matches[0])


def parse(
    args: list[str], spec: list[str], *, permute: bool = True, in_order: bool = False
) -> tuple[list[tuple[str, str | None]], list[str]]:
    """Split args into (canonical option name, argument or None) pairs and operands.

    With permute=False parsing stops at the first operand (POSIX order, `+` in a C optstring).
    With in_order=True (`-` first in a C optstring: RETURN_IN_ORDER) each operand before `--`
    comes among the options, in its place, as ("", operand), and only those after `--` are
    returned as operands. Raises OptionError for unknown, ambiguous or badly-argumented options.
    """
    shorts, longs = _table(spec)
    found: list[tuple[str, str | None]] = []
    operands: list[str] = []
    try:
        _walk(args, shorts, longs, found, operands, permute, in_order)
    except OptionError as e:
        e.found = found  # what came before the error: an in-order caller has acted on it
        raise
    return found, operands


def _walk(
    args: list[str],
    shorts: dict,
    longs: dict,
    found: list[tuple[str, str | None]],
    operands: list[str],
    permute: bool,
    in_order: bool,
) -> None:
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            operands += args[i:]
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            canonical, kind, shown = _long(longs, name, arg)
            if kind is None and eq:
                raise OptionError(f"option '--{shown}' doesn't allow an argument")
            if kind == "required" and not eq:
                if i >= len(args):
                    raise OptionError(f"option '--{shown}' requires an argument")
                value, eq = args[i], "="
                i += 1
            found.append((canonical, value if eq else None))
        elif arg.startswith("-") and arg != "-":
            i = _shorts(shorts, arg, args, i, found)
        elif in_order:
            found.append(("", arg))
        elif permute:
            operands.append(arg)
        else:
            operands += args[i - 1 :]
            break


def _shorts(shorts: dict, arg: str, args: list[str], i: int, found: list) -> int:
    """Parse one cluster of short options; returns the index of the next argv word."""
    j = 1
    while j < len(arg):
        letter = arg[j]
        j += 1
        if letter not in shorts:
            raise OptionError(f"invalid option -- '{letter}'")
        canonical, kind = shorts[letter]
        if kind is None:
            found.append((canonical, None))
            continue
        if j < len(arg):
            found.append((canonical, arg[j:]))
        elif kind == "optional":
            found.append((canonical, None))
        elif i < len(args):
            found.append((canonical, args[i]))
            i += 1
        else:
            raise OptionError(f"option requires an argument -- '{letter}'")
        break
    return i
