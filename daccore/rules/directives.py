"""The burst-buffer directive grammar: the one place that reads `#DW` / `#BB` lines.

    #DW jobdw capacity=<size> access_mode=striped|private|striped,private type=scratch [pool=<p>]
    #DW persistentdw name=<name>                     (repeatable)
    #DW stage_in  type=file|directory|list source=<abs path> destination=$DW_JOB_STRIPED/...
    #DW stage_in  type=list source=<abs path>   (each line of the list: source destination)
    #DW stage_out type=file|directory|list source=$DW_JOB_STRIPED/... destination=<abs path>
    #DW swap <size>
    #BB create_persistent name=<name> capacity=<size> access_mode=...|access=... type=... [pool=]
    #BB destroy_persistent name=<name> [hurry]

Every directive is accepted under `#DW`, `#BB` and the site's burst_buffer/lua `Directive=`
(default `BB_LUA`). A line of bare `key=value` pairs (`#BB capacity=1TiB pool=fast`, what
`sbatch --bb "capacity=… access=…"` produces) is a jobdw. Directive lines are found as Slurm's
`_xlate_batch` finds them (burst_buffer_datawarp.c and burst_buffer_lua.c, the same in 22.05,
24.11 and 26.05): in the script's leading comment block, which empty lines do not end (Slurm
splits with strtok_r, which skips them) and the first other line not starting with `#` does;
`#SBATCH` and other comment lines may be mixed in. Slurm matches a prefix as a string
(`#BBcreate_persistent` is a create_persistent to burst_buffer/datawarp), so a line that runs
on from its prefix where Slurm may read it is refused, not read one way (_prefix). A trailing
`\\` continues a directive onto the next non-empty line, which must start with the same
prefix: Slurm ends the directive at any other line (datawarp refuses a `#DW` line continued by
a `#BB` one), so that is refused too; the lines are joined as Slurm joins them. A key given
twice with the same value counts once (Slurm's own tests write `type=scratch` twice); with two
values it is refused. Every kind of directive, that block's bytes and its lines are bounded
(daccore.records.bounds), so that no script costs job_process more than one at those bounds.

Standard library only, and nothing slow: job_process runs inside slurmctld under its locks.
Every refusal is a DirectiveError whose message is one line: `line N: <directive>: <reason>`.
"""

from __future__ import annotations

import re
from collections import namedtuple

from daccore.errors import UserError
from daccore.records.bounds import (
    MAX_CREATE_LINES,
    MAX_DESTROY_LINES,
    MAX_PATH,
    MAX_SCRIPT_HEAD,
    MAX_SCRIPT_HEAD_LINES,
    MAX_STAGE_LINES,
    MAX_STAGE_TEXT,
)
from daccore.units import parse_capacity

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "DirectiveError",
    "JobDW",
    "Stage",
    "CreatePersistent",
    "DestroyPersistent",
    "Directives",
    "parse_script",
    "head_read",
    "PERSISTENT_NAME",
    "DIRECTIVES",
]

#: Slurm (and DataWarp) refuse persistent names starting with a digit.
PERSISTENT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
#: where a script's leading comment block ends, past its first line: the first line neither
#: empty nor starting with '#' starts (Slurm's strtok_r at '\n' skips empty lines)
_HEAD_END = re.compile(rb"\n[^#\n]")
#: what a script whose leading comment block is not empty starts with (strtok_r skips empty
#: lines at the start too: a script may start with them, sbatch aside)
_HEAD_START = (b"#", b"\n")
#: the bytes of a script its block's end is looked for in first; then no further than a block
#: within the bounds ends: the first MAX_SCRIPT_HEAD_LINES lines (each line, empty ones above
#: all, is a place the block may end: through 1 MiB of empty lines the search took 7 ms)
_QUICK = 64 << 10
_LINES = re.compile(rb"(?:[^\n]*\n){%d}" % MAX_SCRIPT_HEAD_LINES)
#: C's isspace(): what Slurm skips after a prefix, and looks for before a continuing '\'
_C_SPACE = " \t\n\v\f\r"
_C_SPACES = re.compile(r"[ \t\n\v\f\r]")
ACCESS_MODES = ("striped", "private", "striped,private")
STAGE_TYPES = ("file", "directory", "list")
#: a buffer-side path: $DW_JOB_STRIPED/…, ${DW_JOB_PRIVATE}/…, $DW_PERSISTENT_STRIPED_<name>/…
BUFFER_PATH = re.compile(r"^\$(?:\{(DW_[A-Z0-9_]+)\}|(DW_[A-Za-z0-9_.-]+))(/.*)?$")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f'\"`\\]")
# A line's characters are looked at by these, never one by one in Python: at 0.7 MiB of
# directives (every bound at once) that took 30 ms, inside slurmctld.
_ESCAPED = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8 (surrogateescape)
_ODD_SPACE = re.compile(r"[^\S ]")  # what str.split() splits at but an ASCII space

DIRECTIVES = {
    "jobdw": ("capacity", "access_mode", "type", "pool"),
    "persistentdw": ("name",),
    "stage_in": ("type", "source", "destination"),
    "stage_out": ("type", "source", "destination"),
    "swap": (),
    "create_persistent": ("name", "capacity", "access_mode", "access", "type", "pool"),
    "destroy_persistent": ("name",),
}


_STAGE_INSTEAD = ": stage a directory, or name the files in one type=list line"
#: the most lines of each kind one script may have, and what to do instead (one jobdw and one
#: swap, DataWarp's rule, are refused with the first one's line)
_MOST = {
    "persistentdw": (MAX_STAGE_LINES, ""),  # a record's bounds (daccore.records.bounds)
    "stage_in": (MAX_STAGE_LINES, _STAGE_INSTEAD),
    "stage_out": (MAX_STAGE_LINES, _STAGE_INSTEAD),
    "create_persistent": (MAX_CREATE_LINES, ": create the others from another job"),
    "destroy_persistent": (MAX_DESTROY_LINES, ": destroy the others from another job"),
}


class DirectiveError(UserError):
    """A directive the user must fix: `line N: <directive>: <reason>`."""

    def __init__(self, line: int, directive: str, reason: str):
        super().__init__(f"line {line}: {directive}: {reason}")
        self.line, self.directive, self.reason = line, directive, reason


# namedtuples and a plain class, not dataclasses: this runs inside slurmctld (see the module
# docstring), and `dataclasses` alone costs 18 ms to import.
JobDW = namedtuple("JobDW", "line capacity access type pool", defaults=("striped", "scratch", None))
#: direction is "in" or "out"
Stage = namedtuple("Stage", "line direction type source destination")
CreatePersistent = namedtuple(
    "CreatePersistent", "line name capacity access type pool", defaults=("striped", "scratch", None)
)
DestroyPersistent = namedtuple("DestroyPersistent", "line name hurry", defaults=(False,))


class Directives:
    """Everything a script asks of dac, validated."""

    __slots__ = (
        "jobdw",
        "persistent",
        "persistent_lines",
        "stage_in",
        "stage_out",
        "swap",
        "swap_line",
        "create",
        "destroy",
    )

    def __init__(self) -> None:
        self.jobdw: JobDW | None = None
        self.persistent: list[str] = []
        self.persistent_lines: list[int] = []  # the line of each of `persistent`
        self.stage_in: list[Stage] = []
        self.stage_out: list[Stage] = []
        self.swap = 0
        self.swap_line = 0
        self.create: list[CreatePersistent] = []
        self.destroy: list[DestroyPersistent] = []

    @property
    def empty(self) -> bool:
        return not (self.jobdw or self.persistent or self.create or self.destroy)


def parse_script(script: bytes | str, lua_directive: str = "BB_LUA") -> Directives:
    """The directives of a job script, or DirectiveError for the first bad one."""
    if isinstance(script, str):  # as the bytes it was read from: the bounds are of bytes
        script = script.encode("utf-8", errors="surrogatepass")
    head = _head(script).decode("utf-8", errors="surrogateescape")
    prefixes, lua = _prefixes(lua_directive)
    found = Directives()
    counts = dict.fromkeys(_MOST, 0)
    attached: set[str] = set()  # found.persistent's names: a list looked through was quadratic
    jobdw_line = stage_bytes = 0
    for number, text in _directive_lines(head, prefixes, lua):
        directive, args = _split(number, text)
        if directive in counts:  # counted before its words are read
            counts[directive] += 1
            most, instead = _MOST[directive]
            if counts[directive] > most:
                raise DirectiveError(
                    number, directive, f"more than {most} {directive} lines{instead}"
                )
        if directive == "jobdw":
            if found.jobdw is not None:
                raise DirectiveError(
                    number,
                    "jobdw",
                    f"a job may have only one jobdw (the first is on line {jobdw_line})",
                )
            found.jobdw, jobdw_line = _jobdw(number, args), number
        elif directive == "persistentdw":
            name = _name(number, directive, _keys(number, directive, args, required=("name",)))
            if name in attached:
                raise DirectiveError(number, directive, f"'{name}' is attached twice")
            attached.add(name)
            found.persistent.append(name)
            found.persistent_lines.append(number)
        elif directive in ("stage_in", "stage_out"):
            stage = _stage(number, directive, args)
            staged = found.stage_in if stage.direction == "in" else found.stage_out
            staged.append(stage)
            stage_bytes += len(stage.source.encode()) + len(stage.destination.encode())
            if stage_bytes > MAX_STAGE_TEXT:
                raise DirectiveError(
                    number,
                    directive,
                    f"the stage lines' paths come to more "
                    f"than {MAX_STAGE_TEXT // 1024} KiB: stage directories, or "
                    "name the files in one type=list line",
                )
        elif directive == "swap":
            found.swap = _swap(number, args, found.swap)
            found.swap_line = number
        elif directive == "create_persistent":
            found.create.append(_create(number, args))
        else:
            found.destroy.append(_destroy(number, args))
    _check_stage_targets(found)
    if found.swap and found.jobdw is None:
        raise DirectiveError(
            _first_line(head, prefixes, lua, "swap"),
            "swap",
            "swap needs a #DW jobdw buffer to hold the swap files",
        )
    return found


def head_read(data: bytes | bytearray, new: int = 0) -> bool:
    """Whether a script's first bytes, `data`, hold all parse_script reads of it: the end of
    its leading comment block, or more of it than MAX_SCRIPT_HEAD bytes (and the one after, which
    says whether it ends there). `new`: where the bytes not looked at before start."""
    if len(data) > MAX_SCRIPT_HEAD + 1 or data[:1] not in (b"", *_HEAD_START):
        return True
    return _HEAD_END.search(data, max(0, new - 1)) is not None


def _head(script: bytes) -> bytes:
    """The script's leading comment block, or DirectiveError past its bounds."""
    if not script.startswith(_HEAD_START):
        return b""
    end = _HEAD_END.search(script, 0, _QUICK)
    if end is None and len(script) > _QUICK:
        lines = _LINES.match(script, 0, MAX_SCRIPT_HEAD + 1)  # within the byte bound
        last = MAX_SCRIPT_HEAD if lines is None else lines.end() - 1  # where it may end
        end = _HEAD_END.search(script, _QUICK - 1, last + 2)
        if end is None:  # the block goes on past a bound: as much of it as shows that
            script = script[: last + 2]
    head = script if end is None else script[: end.start()]
    if len(head) > MAX_SCRIPT_HEAD:
        raise DirectiveError(
            head.count(b"\n", 0, MAX_SCRIPT_HEAD) + 1,
            "script",
            f"the comment block it starts with, where directives are read, is more than "
            f"{MAX_SCRIPT_HEAD // 1024} KiB: move comments below the first command",
        )
    if head.count(b"\n") + (not head.endswith(b"\n")) > MAX_SCRIPT_HEAD_LINES:
        raise DirectiveError(
            MAX_SCRIPT_HEAD_LINES + 1,
            "script",
            f"the comment block it starts with, where directives are read, is more than "
            f"{MAX_SCRIPT_HEAD_LINES} lines: move comments below the first command",
        )
    return head


def _prefixes(lua_directive: str) -> tuple[tuple[str, ...], str]:
    """The prefixes a directive line may start with, in the order a line is read by the first
    it starts with, and burst_buffer/lua's among them: that one first, which reads any line
    starting with it (`#BB_LUA x` is not a #BB line of `_LUA x`; with `Directive=B`, `#BB x` is
    a #B line of `B x`)."""
    found = _PREFIXES.get(lua_directive)
    if found is None:
        lua = "#" + lua_directive
        found = (lua, *(p for p in ("#DW", "#BB") if p != lua)), lua
        _PREFIXES[lua_directive] = found
    return found


_PREFIXES: dict[str, tuple[tuple[str, ...], str]] = {}


def _directive_lines(head: str, prefixes: tuple[str, ...], lua: str) -> Iterator[tuple[int, str]]:
    """(line number, text after the prefix) of each directive line of the leading comment
    block, found and joined as Slurm's _xlate_batch does (numbered by their first line)."""
    lines = head.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.startswith(prefixes):  # empty, #!/bin/sh, #SBATCH or another comment
            continue
        start, prefix = i, _prefix(i, line, prefixes, lua)
        if not prefix:
            continue
        text = line[len(prefix) :]
        if text.endswith("\\"):
            text, i = _joined(start, line, prefix, lines, i, prefixes, lua)
        yield start, text.lstrip(_C_SPACE)  # as Slurm skips isspace() after the prefix


def _prefix(number: int, line: str, prefixes: tuple[str, ...], lua: str) -> str:
    """The prefix `line` starts with, followed by a space or nothing; "" for a comment. Slurm
    matches a prefix as a string, so a line running on from its prefix is refused rather than
    read one way when Slurm may read it: burst_buffer/lua takes any line starting with `lua`
    (its Directive) for one, and burst_buffer/datawarp a `#BB` or `#DW` line for one of the
    word its text starts with (`#BBcreate_persistent …` creates a buffer), but every such word
    starts with a lowercase letter: `#BB_LUA …` on a site whose Directive is another, `#DWARF`,
    are comments to both plugins, as to dac. (Datawarp joins the line after one of them ending
    in `\\` to it, and ignores both; dac reads that line: more than Slurm, never less.)"""
    for prefix in prefixes:
        if line.startswith(prefix):
            break
    next_ = line[len(prefix) : len(prefix) + 1]
    if next_ and next_ not in _C_SPACE:
        if prefix != lua and not "a" <= next_ <= "z":
            return ""
        word = _C_SPACES.split(line, 1)[0]
        raise DirectiveError(
            number,
            _show(word) if word.isprintable() else prefix + "…",
            f"put a space after {prefix} (Slurm reads a line starting with {prefix} as a "
            "directive)",
        )
    return prefix


def _joined(
    start: int,
    line: str,
    prefix: str,
    lines: list[str],
    i: int,
    prefixes: tuple[str, ...],
    lua: str,
) -> tuple[str, int]:
    """The text after `prefix` of the directive line `line` (number `start`, ending in `\\`)
    joined with the lines that continue it, as Slurm joins them: each without its `\\`, the
    next without its prefix and, when a space came before the `\\`, the spaces after that. And
    the index of the line after the last. The pieces are joined once: joined one by one, 9,000
    lines of 100 bytes took 1.6 s."""
    pieces = []
    number, text = start, line[len(prefix) :]
    while text.endswith("\\"):
        space = line[-2] in _C_SPACE  # Slurm's isspace(tok[len - 2]), whatever it skipped
        pieces.append(text[:-1])
        while i < len(lines) and not lines[i]:  # strtok_r skips empty lines here too
            i += 1
        more = lines[i] if i < len(lines) else ""
        if not more.startswith(prefix) or _prefix(i + 1, more, prefixes, lua) != prefix:
            # Slurm would end the directive here (datawarp: refuse a #DW line going on in #BB)
            raise DirectiveError(number, _named("".join(pieces)), _unjoined(prefix, more, i + 1))
        line, number, i = more, i + 1, i + 1
        text = line[len(prefix) :].lstrip(_C_SPACE) if space else line[len(prefix) :]
    pieces.append(text)
    return "".join(pieces), i


def _unjoined(prefix: str, more: str, number: int) -> str:
    """Why a line ending in `\\` is refused when `more`, line `number`, does not continue it."""
    if not more:
        return f"ends in '\\' but no '{prefix} ' line follows it: drop the '\\'"
    return (
        f"ends in '\\' but line {number} (the next not empty) does not start with '{prefix} ', "
        f"so Slurm would not join them: continue on a '{prefix} ' line or drop the '\\'"
    )


def _named(text: str) -> str:
    """What to call the directive `text` starts in a refusal that has not read it."""
    words = text.split(None, 1)
    if not words:
        return "directive"
    return "jobdw" if "=" in words[0] else (words[0] if words[0] in DIRECTIVES else "directive")


def _split(number: int, text: str) -> tuple[str, list[str]]:
    bad = _UNSAFE.search(text)
    if bad:
        what = (
            "a quote"
            if bad.group() in "'\"`"
            else ("a backslash" if bad.group() == "\\" else "a control character")
        )
        raise DirectiveError(
            number,
            text.split()[0] if text.split() else "directive",
            f"contains {what}, which directives do not allow",
        )
    if _ESCAPED.search(text):
        raise DirectiveError(number, "directive", "is not valid UTF-8")
    # Slurm ends a capacity at an ASCII space only: `capacity=1GiB<U+00A0>pool=p` is 1 byte there
    odd = _ODD_SPACE.search(text)
    if odd:
        first = text.split()[0] if text.split() else "directive"  # only odd spaces
        raise DirectiveError(
            number,
            "jobdw" if "=" in first else _show(first),
            f"contains the space U+{ord(odd.group()):04X}; separate words with ASCII spaces",
        )
    words = text.split()
    if not words:
        raise DirectiveError(
            number, "directive", f"is empty (expected one of {', '.join(DIRECTIVES)})"
        )
    if "=" in words[0]:
        return "jobdw", ["access_mode=" + w[7:] if w.startswith("access=") else w for w in words]
    if words[0] not in DIRECTIVES:
        raise DirectiveError(
            number, _show(words[0]), f"unknown directive (expected one of {', '.join(DIRECTIVES)})"
        )
    return words[0], words[1:]


def _show(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _keys(
    number: int,
    directive: str,
    args: list[str],
    required: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
) -> dict[str, str]:
    allowed = DIRECTIVES[directive]
    out: dict[str, str] = {}
    for arg in args:
        if arg in flags:
            out[arg] = ""
            continue
        key, eq, value = arg.partition("=")
        if not eq:
            raise DirectiveError(number, directive, f"'{_show(arg)}' is not key=value")
        if key not in allowed:
            raise DirectiveError(
                number,
                directive,
                f"unknown key '{_show(key)}' (expected {', '.join(allowed + flags)})",
            )
        if key in out:
            if out[key] == value:  # as Slurm's own tests write `type=scratch` twice
                continue
            raise DirectiveError(number, directive, f"{key} is given twice")
        if not value:
            raise DirectiveError(number, directive, f"{key} is empty")
        out[key] = value
    for key in required:
        if key not in out:
            raise DirectiveError(number, directive, f"{key} is required")
    return out


def _size(number: int, directive: str, key: str, text: str) -> int:
    # Slurm reads this text too (units.parse_capacity says how): it must mean the same there
    try:
        value = parse_capacity(text)
    except ValueError as e:
        raise DirectiveError(number, directive, f"{key} '{_show(text)}' {e}") from None
    if value <= 0:
        raise DirectiveError(number, directive, f"{key} '{text}' must be greater than zero")
    return value


def _access(number: int, directive: str, text: str) -> str:
    modes = text.split(",")
    if not set(modes) <= {"striped", "private"} or len(modes) != len(set(modes)):
        raise DirectiveError(
            number,
            directive,
            f"access_mode '{_show(text)}' must be striped, private or striped,private",
        )
    return "striped,private" if len(modes) == 2 else modes[0]


def _type(number: int, directive: str, text: str) -> str:
    if text == "cache":
        raise DirectiveError(number, directive, "type=cache is not supported yet; use type=scratch")
    if text != "scratch":
        raise DirectiveError(number, directive, f"type '{_show(text)}' must be scratch")
    return text


def _pool(number: int, directive: str, text: str | None) -> str | None:
    if text is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", text):
        raise DirectiveError(number, directive, f"pool '{_show(text)}' is not a pool name")
    return text


def _name(number: int, directive: str, keys: dict[str, str]) -> str:
    name = keys["name"]
    if not PERSISTENT_NAME.match(name):
        raise DirectiveError(
            number,
            directive,
            f"name '{_show(name)}' must start with a letter "
            "and contain only letters, digits, _ . -",
        )
    return name


def _jobdw(number: int, args: list[str]) -> JobDW:
    k = _keys(number, "jobdw", args, required=("capacity",))
    return JobDW(
        number,
        _size(number, "jobdw", "capacity", k["capacity"]),
        _access(number, "jobdw", k.get("access_mode", "striped")),
        _type(number, "jobdw", k.get("type", "scratch")),
        _pool(number, "jobdw", k.get("pool")),
    )


def _create(number: int, args: list[str]) -> CreatePersistent:
    d = "create_persistent"
    k = _keys(number, d, args, required=("name", "capacity"))
    if "access" in k and "access_mode" in k:
        raise DirectiveError(number, d, "give access_mode or access, not both")
    return CreatePersistent(
        number,
        _name(number, d, k),
        _size(number, d, "capacity", k["capacity"]),
        _access(number, d, k.get("access_mode", k.get("access", "striped"))),
        _type(number, d, k.get("type", "scratch")),
        _pool(number, d, k.get("pool")),
    )


def _destroy(number: int, args: list[str]) -> DestroyPersistent:
    k = _keys(number, "destroy_persistent", args, required=("name",), flags=("hurry",))
    return DestroyPersistent(number, _name(number, "destroy_persistent", k), "hurry" in k)


def _swap(number: int, args: list[str], previous: int) -> int:
    if previous:
        raise DirectiveError(number, "swap", "swap is given twice")
    if len(args) != 1 or "=" in args[0]:
        raise DirectiveError(number, "swap", "expected one size, as in '#DW swap 4GiB'")
    try:
        parse_capacity(args[0])
    except ValueError:
        # burst_buffer/datawarp reads a swap size's leading number as GiB per node (strtol)
        raise DirectiveError(
            number,
            "swap",
            f"size '{_show(args[0])}' must be whole ASCII "
            "digits and a unit K, M, G, T, P with iB or B, "
            "as in 4GiB",
        ) from None
    return _size(number, "swap", "size", args[0])


def _stage(number: int, directive: str, args: list[str]) -> Stage:
    k = _keys(number, directive, args, required=("type", "source"))
    if "destination" not in k:
        if k["type"] != "list" or directive != "stage_in":
            raise DirectiveError(number, directive, "destination is required")
        # each line of the list names its source and its destination in the buffer
        # ($DW_JOB_STRIPED/..., or relative to it), as data-acc and NERSC's scripts write it
        k["destination"] = "$DW_JOB_STRIPED"
    if any("capacity=" in v for v in k.values()):
        # Slurm takes the first `capacity=` anywhere on a directive line as the buffer's size
        raise DirectiveError(
            number,
            directive,
            "a path contains 'capacity=', which Slurm would read as a buffer size",
        )
    if k["type"] not in STAGE_TYPES:
        raise DirectiveError(
            number, directive, f"type '{_show(k['type'])}' must be file, directory or list"
        )
    for key in ("source", "destination"):
        path = k[key]
        if len(path) > MAX_PATH:
            raise DirectiveError(
                number, directive, f"{key} is {len(path)} characters long; at most {MAX_PATH}"
            )
        if ".." in path.split("/"):
            raise DirectiveError(number, directive, f"{key} '{_show(path)}' must not contain '..'")
        if not (path.startswith("/") or BUFFER_PATH.match(path)):
            raise DirectiveError(
                number, directive, f"{key} '{_show(path)}' must be an absolute path"
            )
    inside, outside = (
        ("destination", "source") if directive == "stage_in" else ("source", "destination")
    )
    if not BUFFER_PATH.match(k[inside]):
        raise DirectiveError(number, directive, f"{inside} must be under $DW_JOB_STRIPED")
    if BUFFER_PATH.match(k[outside]):
        raise DirectiveError(
            number, directive, f"{outside} '{_show(k[outside])}' must be a path outside the buffer"
        )
    return Stage(number, directive.removeprefix("stage_"), k["type"], k["source"], k["destination"])


def _check_stage_targets(found: Directives) -> None:
    """Each stage line's buffer side is the job buffer's striped directory, which the job has.
    Staging goes through $DW_JOB_STRIPED only, as in DataWarp's examples: a private directory
    is one per compute node, and stages run before and after the job, on no node; a persistent
    buffer is filled and emptied by the jobs that attach it."""
    access = found.jobdw.access if found.jobdw else ""
    for stage in found.stage_in + found.stage_out:
        directive = f"stage_{stage.direction}"
        path = stage.destination if stage.direction == "in" else stage.source
        m = BUFFER_PATH.match(path)
        assert m is not None, path  # every buffer-side path was matched when parsed
        var = m.group(1) or m.group(2)
        if var == "DW_JOB_PRIVATE":
            raise DirectiveError(
                stage.line,
                directive,
                "$DW_JOB_PRIVATE cannot be staged (one "
                "directory per compute node, and stages "
                "run on none): use $DW_JOB_STRIPED",
            )
        if var.startswith("DW_PERSISTENT_STRIPED_"):
            raise DirectiveError(
                stage.line,
                directive,
                f"${var} cannot be staged (a persistent "
                "buffer is filled by the jobs that "
                "attach it): use $DW_JOB_STRIPED",
            )
        if var != "DW_JOB_STRIPED":
            raise DirectiveError(
                stage.line,
                directive,
                f"${_show(var)} is not a buffer variable (stage through $DW_JOB_STRIPED)",
            )
        if found.jobdw is None:
            raise DirectiveError(
                stage.line, directive, f"the job has no buffer for ${var} (add a #DW jobdw line)"
            )
        if "striped" not in access.split(","):
            raise DirectiveError(
                stage.line,
                directive,
                f"${var} needs access_mode=striped on the jobdw line (it has {access})",
            )


def _first_line(script: str, prefixes: tuple[str, ...], lua: str, directive: str) -> int:
    for number, text in _directive_lines(script, prefixes, lua):
        if text.split()[:1] == [directive]:
            return number
    return 0
