"""`dacctl slurm-files DIR`: the Slurm plugin files of this installation, written into a site's
Slurm configuration directory, so the burst_buffer.lua slurmctld runs is the one this dac was
tested with (slurm-plugin/).

Anyone may run it: it writes only files any user can read from the package, and only where the
caller may write. It runs as root in the common case, so it never follows a link it did not
make: `DIR` is opened without following a link in its last component, and each file is written
to a new name beside its target and renamed over it through that directory's descriptor (a
rename replaces a planted link, never writes through it). A file that differs from the
package's is kept unless `force`: the site may have edited its burst_buffer.conf.

With `lua_bytecode`, burst_buffer.lua is written compiled to Lua 5.1 bytecode by that
interpreter: burst_buffer/lua loads the script afresh for every hook, inside the time of the
three it runs under slurmctld's job lock, and compiling its source was a quarter of a call
(docs/performance.md). The chunk keeps the name `@DIR/burst_buffer.lua`, by which the script
finds burst_buffer.env beside it. Bytecode loads only in the Lua it was made by (5.1 here, as
Slurm links in Debian and Ubuntu; RHEL's Slurm links 5.3 or 5.4): the site says which.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess

from daccore.errors import AdminError, UserError
from daccore.share import SLURM_EXECUTABLES, SLURM_FILES, asset

__all__ = ["write_slurm_files", "lua_bytecode_of", "LUA_SCRIPT"]


def write_slurm_files(
    directory: str, force: bool = False, lua_bytecode: str | None = None
) -> list[tuple[str, str]]:
    """Write SLURM_FILES into `directory` (made 0755 if absent); [(name, "written" | "same")].
    UserError naming the first file that differs when not `force`. `lua_bytecode`: the Lua
    5.1 interpreter burst_buffer.lua is compiled with (module docstring)."""
    try:
        os.mkdir(directory, 0o755)
    except FileExistsError:
        pass
    except OSError as e:
        raise AdminError(f"slurm-files: cannot make {directory}: {e.strerror}") from None
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        why = (
            "a link, or not a directory (give the directory itself)"
            if e.errno in (errno.ENOTDIR, errno.ELOOP)
            else e.strerror
        )
        raise AdminError(f"slurm-files: {directory}: {why}") from None
    try:
        wanted = {name: asset("slurm", name).read_bytes() for name in SLURM_FILES}
        if lua_bytecode is not None:
            chunk = "@" + os.path.join(os.path.abspath(directory), LUA_SCRIPT)
            wanted[LUA_SCRIPT] = lua_bytecode_of(wanted[LUA_SCRIPT], chunk, lua_bytecode)
        done = []
        for name, data in wanted.items():
            have = _read(dfd, name)
            if have == data:
                done.append((name, "same"))
                continue
            if have is not None and not force:
                raise UserError(
                    f"slurm-files: {directory}/{name} exists and differs from this "
                    "dac's; compare them, then run again with --force to replace it"
                )
            _replace(dfd, name, data)
            done.append((name, "written"))
        return done
    finally:
        os.close(dfd)


LUA_SCRIPT = "burst_buffer.lua"
#: a Lua 5.1 binary chunk's header: ESC "Lua", version 0x51
_LUA51_HEADER = b"\x1bLua\x51"
#: compiles stdin as chunk $DAC_CHUNK and writes its bytecode, in Lua 5.1 only (string.dump
#: writes what luac does; luac cannot name the chunk other than by its input's path)
_COMPILE = (
    'assert(_VERSION == "Lua 5.1", _VERSION .. " is not Lua 5.1") '
    'io.write(string.dump(assert(loadstring(io.read("*a"), os.getenv("DAC_CHUNK")))))'
)


def lua_bytecode_of(source: bytes, chunk: str, lua: str) -> bytes:
    """`source` compiled by the Lua 5.1 interpreter `lua` as chunk `chunk` ("@path"), checked
    to load back in it; AdminError saying why not."""
    env = {"DAC_CHUNK": chunk, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    try:  # no LUA_INIT, LUA_PATH or LUA_CPATH of the caller's: only the interpreter runs
        made = subprocess.run(
            [lua, "-e", _COMPILE], input=source, capture_output=True, env=env, timeout=60
        )
        back = subprocess.run(
            [lua, "-e", 'assert(loadstring(io.read("*a")))'],
            input=made.stdout,
            capture_output=True,
            env=env,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AdminError(f"slurm-files: cannot run {lua}: {e}") from None
    why = (made.stderr or back.stderr).decode(errors="replace").strip().splitlines()
    if made.returncode or back.returncode or not made.stdout.startswith(_LUA51_HEADER):
        raise AdminError(
            f"slurm-files: {lua} cannot compile {LUA_SCRIPT} to Lua 5.1 bytecode: "
            f"{why[0] if why else 'no bytecode written'}"
        )
    return made.stdout


def _read(dfd: int, name: str) -> bytes | None:
    """The regular file `name` in dfd, None when absent; anything else (a link) differs."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError:
        return b""  # a link, a FIFO, ...: never read through; replaced only with --force
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(1 << 20)
    finally:
        os.close(fd)


def _replace(dfd: int, name: str, data: bytes) -> None:
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            # whatever the umask: slurmctld's user reads them, and runs GetSysState's
            os.fchmod(f.fileno(), 0o755 if name in SLURM_EXECUTABLES else 0o644)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError as e:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise AdminError(f"slurm-files: cannot write {name}: {e.strerror}") from None
