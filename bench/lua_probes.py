"""Where one Lua hook call inside slurmctld goes (issue 34), for `slurm_hooks.py --probes`.

burst_buffer/lua makes a Lua state for every call, loads burst_buffer.lua into it, runs the
hook and closes it, all inside the time it logs ("ran for"). uprobes (`perf probe`) on
slurmctld's own liblua5.1 (`luaL_newstate`, `luaL_openlibs`, `luaL_loadfile`, `lua_pcall`,
`lua_close`) and libc (`dlopen`, `dlclose`), entry and return, recorded with `perf record -p`
while the bench submits, split each call into its parts: per thread, `luaL_newstate` to
`lua_close`'s return is one call; the first `lua_pcall` at depth 0 runs the chunk, the second
the hook; from `luaL_loadfile`'s return to the chunk is Slurm's `slurm` table. The libraries
are the ones slurmctld mapped (/proc/<pid>/maps), when the host sees them at the same path.
Each probe hit costs a few microseconds: about 0.05 ms a call.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

GROUP = "dachooks"
LUA = ("luaL_newstate", "luaL_openlibs", "luaL_loadfile", "lua_pcall", "lua_close")
LIBC = ("dlopen", "dlclose")


def _mapped(pid: int, name: str) -> str | None:
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split()[-1]
        if os.path.basename(path).startswith(name):
            # the path as slurmctld sees it; perf needs it on the host: the local DAC binds a
            # chroot at its own path, so a chroot release's maps name the host's path
            there, here = os.stat(f"/proc/{pid}/root{path}"), os.stat(path)
            if (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino):
                return path
    return None


def _add(lib: str, func: str) -> None:
    for event, spec in ((func, func), (f"{func}__ret", f"{func}%return")):
        subprocess.run(
            ["perf", "probe", "-q", "-x", lib, "-a", f"{GROUP}:{event}={spec}"],
            check=True,
            capture_output=True,
        )


@contextmanager
def recorded(pid: int):
    """Records slurmctld `pid`'s Lua calls meanwhile; yields a list that holds, afterwards,
    the report's lines (or one line saying why there is none)."""
    lines: list[str] = []
    lua, libc = _mapped(pid, "liblua5.1.so"), _mapped(pid, "libc.so.6")
    perf = None
    out = Path(tempfile.mkdtemp(prefix="dac-lua-probes-")) / "perf.data"
    try:
        if shutil.which("perf") is None:  # only --probes needs it: make deps does not install it
            raise RuntimeError("perf not found: apt-get install linux-perf")
        if lua is None or libc is None:
            raise RuntimeError(f"slurmctld {pid}'s liblua5.1 or libc is not at its path here")
        subprocess.run(["perf", "probe", "-q", "-d", f"{GROUP}:*"], capture_output=True)
        for f in LUA:
            _add(lua, f)
        for f in LIBC:
            _add(libc, f)
        perf = subprocess.Popen(
            ["perf", "record", "-q", "-e", f"{GROUP}:*", "-p", str(pid), "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
        lines.append(f"probes: none ({getattr(e, 'stderr', b'') or e})")
    try:
        yield lines
    finally:
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=60)
            text = subprocess.run(
                ["perf", "script", "-i", str(out), "-F", "tid,time,event"],
                capture_output=True,
                text=True,
            ).stdout
            lines.extend(report(text))
        subprocess.run(["perf", "probe", "-q", "-d", f"{GROUP}:*"], capture_output=True)


def report(perf_script: str) -> list[str]:
    """Each part's median and p90 over the calls in `perf script -F tid,time,event` output."""
    events: dict[str, list[tuple[float, str]]] = collections.defaultdict(list)
    for line in perf_script.splitlines():
        words = line.split()
        if len(words) >= 3 and words[2].startswith(f"{GROUP}:"):
            t = float(words[1].rstrip(":")) * 1e6
            name = words[2].rstrip(":").split(":")[1].removesuffix("__return")  # perf adds it
            events[words[0]].append((t, name))
    parts: dict[str, list[float]] = collections.defaultdict(list)
    for seq in events.values():
        call: dict | None = None
        for t, name in seq:
            if name == "luaL_newstate":
                call = {"start": t, "dl": 0.0, "stack": [], "top": []}
            if call is None:
                continue
            if name in ("luaL_openlibs__ret", "luaL_loadfile", "luaL_loadfile__ret", "lua_close"):
                call[name] = t
            elif name == "dlopen":
                call["dl0"] = t
            elif name == "dlopen__ret" and "dl0" in call:
                call["dl"] += t - call.pop("dl0")
            elif name == "lua_pcall":
                call["stack"].append(t)
            elif name == "lua_pcall__ret" and call["stack"]:
                start = call["stack"].pop()
                if not call["stack"]:
                    call["top"].append((start, t))
            elif name == "lua_close__ret":
                if len(call["top"]) >= 2 and "luaL_loadfile__ret" in call:
                    (chunk0, chunk1), (hook0, hook1) = call["top"][:2]
                    parts["luaL_newstate + luaL_openlibs"].append(
                        call["luaL_openlibs__ret"] - call["start"]
                    )
                    parts["luaL_loadfile"].append(
                        call["luaL_loadfile__ret"] - call["luaL_loadfile"]
                    )
                    parts["the slurm table (Slurm's)"].append(chunk0 - call["luaL_loadfile__ret"])
                    parts["the chunk"].append(chunk1 - chunk0)
                    parts["the hook"].append(hook1 - hook0)
                    parts["  of it, dlopen"].append(call["dl"])
                    parts["lua_close"].append(t - call["lua_close"])
                    parts["the whole call"].append(t - call["start"])
                call = None
    if not parts:
        return ["probes: no whole call recorded"]
    out = [f"where a call goes (uprobes, {len(parts['the whole call'])} calls, microseconds):"]
    for name, us in parts.items():
        us.sort()
        p90 = us[int(0.9 * (len(us) - 1))]
        out.append(f"  {name:30} median {statistics.median(us):7.0f}  p90 {p90:7.0f}")
    return out
