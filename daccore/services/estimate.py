"""Capacity advice for a job script, the reference architecture's rule: the `du` of the
stage-in sources plus a margin, rounded up to the pool's bricks.

`measure` walks a stage-in source by the copier's rules (`dacd/staging/copier.py`: lstat, links are
never followed, a `list` file names `source destination` per line, sockets, fifos and devices
are skipped), as the calling user: dacctl runs as the user, and the copier will read those files
as that user too, so a path the caller cannot read is a stage-in that would fail. A unit test
keeps this walk and the copier's plan in agreement. Everything else here is pure.

Standard library only.
"""

from __future__ import annotations

import math
import os
import stat
from fractions import Fraction

from daccore.errors import AdminError, UserError
from daccore.units import bricks_needed, parse_size

TYPE_CHECKING = False  # typing's own, without importing typing on a user's command; mypy: True
if TYPE_CHECKING:
    from typing import Callable, Mapping, Protocol

    from daccore.rules.directives import Directives
    from daccore.settings.cache import Json

    class _Granular(Protocol):
        """A pool as find_pool reads it: a Pool, or the user service's answer's stand-in."""

        @property
        def granularity(self) -> int: ...


__all__ = [
    "Measure",
    "measure",
    "parse_margin",
    "suggest_size",
    "find_pool",
    "advise",
    "report",
    "problem_line",
]

_MiB = 1 << 20
#: problems kept per stage line (all are counted)
MAX_PROBLEMS = 5


class Measure:
    """What one stage-in source holds: `bytes` is the apparent size of its regular files (what
    the copier copies), `allocated` what they and its directories occupy on disk
    (st_blocks x 512, as `du` counts); sparse files make it smaller, small files larger."""

    __slots__ = ("bytes", "allocated", "files", "dirs", "links", "problems", "problem_count")

    def __init__(self) -> None:
        self.bytes = self.allocated = self.files = self.dirs = self.links = 0
        self.problems: list[tuple[str, str]] = []
        self.problem_count = 0

    @property
    def inodes(self) -> int:
        return self.files + self.dirs + self.links

    def problem(self, path: str, reason: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append((path, reason))

    def as_dict(self) -> Json:
        return {
            "bytes": self.bytes,
            "allocated_bytes": self.allocated,
            "files": self.files,
            "dirs": self.dirs,
            "links": self.links,
            "inodes": self.inodes,
            "problems": [{"path": p, "reason": r} for p, r in self.problems],
            "problem_count": self.problem_count,
        }


def _why(e: OSError) -> str:
    return (e.strerror or str(e)).lower()


def measure(kind: str, source: str) -> Measure:
    """Walk one stage-in source (`kind` file, directory or list) as the calling user."""
    m = Measure()
    todo = [(kind, source)]
    while todo:
        kind, path = todo.pop(0)
        try:
            st = os.lstat(path)
        except OSError as e:
            m.problem(path, _why(e))
            continue
        if kind == "list":
            todo[:0] = _list_entries(path, m)
        elif kind == "directory":
            if stat.S_ISDIR(st.st_mode):
                _walk(path, st, m)
            else:
                m.problem(path, "not a directory")
        elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            _count(path, st, m)
        else:
            m.problem(path, "not a regular file")
    return m


def _list_entries(path: str, m: Measure) -> list[tuple[str, str]]:
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        m.problem(path, _why(e))
        return []
    out = []
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != 2:
            m.problem(f"{path} line {number}", "expected 'source destination'")
            continue
        try:
            is_dir = stat.S_ISDIR(os.lstat(words[0]).st_mode)
        except OSError as e:
            m.problem(words[0], _why(e))
            continue
        out.append(("directory" if is_dir else "file", words[0]))
    return out


def _count(path: str, st: os.stat_result, m: Measure) -> None:
    if stat.S_ISLNK(st.st_mode):
        m.links += 1
    elif stat.S_ISREG(st.st_mode):
        m.files += 1
        m.bytes += st.st_size
        m.allocated += st.st_blocks * 512
        if not os.access(path, os.R_OK):  # the real uid: the caller's, not an escalated one
            m.problem(path, "not readable")
    # sockets, fifos and devices are not data: the copier skips them too


def _walk(top: str, st: os.stat_result, m: Measure) -> None:
    stack = [(top, st)]
    while stack:
        path, st = stack.pop()
        m.dirs += 1
        m.allocated += st.st_blocks * 512
        try:
            entries = list(os.scandir(path))
        except OSError as e:
            m.problem(path, _why(e))
            continue
        for entry in entries:
            try:
                est = entry.stat(follow_symlinks=False)
            except OSError as e:
                m.problem(entry.path, _why(e))
                continue
            if stat.S_ISDIR(est.st_mode):
                stack.append((entry.path, est))
            else:
                _count(entry.path, est, m)


def parse_margin(text: str) -> Fraction:
    """`0.25` or `25%`, exactly (no float rounding), between 0 and 10 (1000%)."""
    t = text.strip()
    try:
        value = Fraction(t[:-1]) / 100 if t.endswith("%") else Fraction(t)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"'{text}' is not a fraction like 0.25 or a percentage like 25%") from None
    if not 0 <= value <= 10:
        raise ValueError(f"'{text}' must be between 0 and 10 (1000%)")
    return value


def suggest_size(n: int) -> str:
    """The shortest size to write in a directive that parses back to exactly `n`: `1536MiB`,
    `3TB` (pools may have decimal bricks), `1537MiB`, else bytes. Whole numbers only: Slurm
    reads `1.5GiB` as 1 byte, so directives refuse it (units.parse_capacity)."""
    exact = [f"{n // parse_size('1' + u)}{u}" for u in _UNITS if n % parse_size("1" + u) == 0]
    return min(exact, key=len, default=str(n))


_UNITS = ("PiB", "TiB", "GiB", "MiB", "KiB", "PB", "TB", "GB", "MB", "KB")


def find_pool(
    read_pools: Callable[[], Mapping[str, _Granular]], requested: str | None, default: str | None
) -> tuple[str | None, int | None, str | None]:
    """(pool, granularity, None), or (pool or None, None, why it is unknown). `read_pools()`
    returns the pools by name (Store.pools); an unreachable etcd (or user service) makes the
    pool unknown, not the estimate fail."""
    from daccore.services.jobs import pick_pool

    try:
        pools = read_pools()
    except AdminError as e:  # etcd, or dac's user service, unreachable
        return requested or default, None, str(e)
    try:
        name = pick_pool(requested, default, list(pools))
    except UserError as e:
        return None, None, str(e)
    if name not in pools:
        return name, None, f"no pool named '{name}' (pools: {', '.join(sorted(pools)) or 'none'})"
    return name, pools[name].granularity, None


def advise(needed: int, margin: Fraction, granularity: int | None, jobdw: int | None) -> Json:
    """The capacity to ask for: `needed` bytes plus the margin, rounded up to whole bricks
    when the granularity is known (else to whole MiB); and whether the script's `jobdw`
    capacity, as allocated (rounded up to bricks too), holds it: "enough", "tight" (the data
    fits, the margin does not), "too small", or "no jobdw"."""
    with_margin = math.ceil(needed * (1 + margin))
    bricks = max(bricks_needed(with_margin, granularity), 1) if granularity else None
    if granularity and bricks:
        capacity = bricks * granularity
    else:
        capacity = max(bricks_needed(with_margin, _MiB), 1) * _MiB
    verdict, allocated = "no jobdw", None
    if jobdw is not None:
        allocated = bricks_needed(jobdw, granularity) * granularity if granularity else jobdw
        verdict = (
            "too small" if allocated < needed else "tight" if allocated < with_margin else "enough"
        )
    return {
        "needed": needed,
        "with_margin": with_margin,
        "bricks": bricks,
        "capacity": capacity,
        "suggestion": suggest_size(capacity),
        "jobdw_capacity": jobdw,
        "jobdw_allocated": allocated,
        "verdict": verdict,
    }


def report(
    d: Directives,
    measured: list[Measure],
    output: int,
    margin: Fraction,
    pool: tuple[str | None, int | None, str | None],
) -> Json:
    """The --json form of `dacctl estimate`: `measured` holds one Measure per stage_in line of
    the directives `d` (each fills the job's buffer: the grammar allows no other target)."""
    lines = []
    for stage, m in zip(d.stage_in, measured, strict=True):
        lines.append(
            {
                "line": stage.line,
                "type": stage.type,
                "source": stage.source,
                "destination": stage.destination,
                **m.as_dict(),
            }
        )
    job = lines
    name, granularity, pool_error = pool
    data = sum(x["bytes"] for x in job)
    return {
        "stage_in": lines,
        "bytes": data,
        "allocated_bytes": sum(x["allocated_bytes"] for x in job),
        "inodes": sum(x["inodes"] for x in job),
        "output": output,
        "margin": float(margin),
        "pool": name,
        "granularity": granularity,
        "pool_error": pool_error,
        **advise(data + output, margin, granularity, d.jobdw.capacity if d.jobdw else None),
        "problem_count": sum(x["problem_count"] for x in lines),
    }


def problem_line(rep: Json, uid: int) -> str | None:
    """One line naming what a stage-in by user `uid` would fail on, or None."""
    bad = [x for x in rep["stage_in"] if x["problem_count"]]
    if not bad:
        return None
    first = bad[0]["problems"][0]
    more = rep["problem_count"] - 1
    return (
        f"line {bad[0]['line']}: stage_in: {first['path']}: {first['reason']} (as uid "
        f"{uid}; the stage-in runs as you and would fail)"
        + (f", and {more} more path{'s' if more > 1 else ''}" if more else "")
    )
