"""The dacctl a local DAC's users run: `DIR/bin/dacctl`, written by `up`.

Users' commands (status, pools, create-persistent, ...) reach the user service as the user, so
the user must be able to run an interpreter and import dac and its dependencies. Root's may be
out of their reach: a pyenv build under /root (0700), or a venv inside a clone under /root. So:

- the interpreter is root's own (the file itself, not a venv's link to it) when every user can
  run it, else Debian's /usr/bin/python3 when it is the same X.Y (the compiled dependencies
  are built for X.Y); it runs with no site-packages but those named, so dac's dependencies are
  the venv's, never an older copy in the system's dist-packages;
- the import paths (dac itself, the venv's site-packages) are used where they are when every
  user can read them, else copied into `DIR/lib/` (root's, 0755): hard links where the
  filesystem allows (instant, no space), else copies. `down` leaves them; the next `up` makes
  them anew.

What a user runs is root's alone (DIR is root's, `cluster._trusted_workdir`): the launcher
names only paths `up` chose, never a user's.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import sys
import sysconfig
from pathlib import Path

__all__ = ["SYSTEM_PYTHON", "write_launcher", "launcher"]

SYSTEM_PYTHON = "/usr/bin/python3"
#: the launcher's program: its first argument counts the import directories that follow it
_BOOT = (
    "import site, sys; n = int(sys.argv[1]); dirs = sys.argv[2:2 + n]; "
    "[sys.path.insert(0, d) for d in reversed(dirs[:1])]; "
    "[site.addsitedir(d) for d in dirs[1:]]; "
    "from dacctl.main import main; sys.exit(main(sys.argv[2 + n:]))"
)


def launcher(workdir: Path) -> Path:
    return workdir / "bin" / "dacctl"


def open_to_all(path: str | os.PathLike[str], execute: bool = False) -> bool:
    """Whether any user can reach `path` (every directory above searchable by others) and read
    it (or, with `execute`, run it)."""
    p = Path(os.path.realpath(path))
    for d in p.parents:
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(p).st_mode
    if stat.S_ISDIR(mode):
        return bool(mode & stat.S_IXOTH and mode & stat.S_IROTH)
    return bool(mode & (stat.S_IXOTH if execute else stat.S_IROTH))


def _interpreter() -> str | None:
    """root's interpreter itself (not a venv's link to it, which may sit in a private tree) if
    every user can run it and read its stdlib, else Debian's of the same X.Y, else None."""
    stdlib = sysconfig.get_paths()["stdlib"]
    real = os.path.realpath(sys.executable)
    if open_to_all(real, execute=True) and open_to_all(stdlib):
        return real
    if os.path.exists(SYSTEM_PYTHON) and os.path.realpath(SYSTEM_PYTHON).endswith(
        f"python{sys.version_info[0]}.{sys.version_info[1]}"
    ):
        return os.path.realpath(SYSTEM_PYTHON)
    return None


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem: a copy
        shutil.copy2(src, dst)


def write_launcher(workdir: Path) -> str | None:
    """Write `DIR/bin/dacctl` (root's, 0755) for users; returns None, or one line saying why
    users cannot run dacctl here (no interpreter of theirs can load this dac)."""
    import daccore

    python = _interpreter()
    if python is None:
        return (
            f"users cannot run dacctl in this local DAC: {sys.executable} is root's alone "
            f"and {SYSTEM_PYTHON} is not Python {sys.version_info[0]}."
            f"{sys.version_info[1]}; install dac into a venv of {SYSTEM_PYTHON}"
        )
    top = str(Path(daccore.__file__).resolve().parent.parent)  # dac's packages (editable too)
    sites = sorted(
        {
            p
            for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])
            if os.path.isdir(p)
        }
    )  # a system install's may not exist
    lib = workdir / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    dirs = []
    for i, src in enumerate([top, *sites]):
        if open_to_all(src):
            dirs.append(src)
            continue
        lib.mkdir(mode=0o755, exist_ok=True)
        dst = lib / ("dac" if i == 0 else f"site-{i}")
        if i == 0:  # only dac's own packages, not the checkout around them
            dst.mkdir(mode=0o755)
            for pkg in ("daccore", "dacctl", "dacd", "daclocal"):
                if (Path(top) / pkg).is_dir():
                    shutil.copytree(
                        Path(top) / pkg,
                        dst / pkg,
                        copy_function=_link_or_copy,
                        ignore=shutil.ignore_patterns("__pycache__"),
                    )
        else:
            shutil.copytree(src, dst, copy_function=_link_or_copy, symlinks=True)
        _open_dirs(dst)
        dirs.append(str(dst))
    path = launcher(workdir)
    path.parent.mkdir(mode=0o755, exist_ok=True)
    # -I: no PYTHONPATH or user site; -S: no system site-packages either (Debian's
    # dist-packages may hold older click or pydantic), only the directories named here
    path.write_text(
        "#!/bin/sh\n# dacctl for this local DAC's users (daclocal/userbin.py)\n"
        f"exec {shlex.quote(python)} -I -S -c {shlex.quote(_BOOT)} {len(dirs)} "
        f'{" ".join(shlex.quote(d) for d in dirs)} "$@"\n'
    )
    path.chmod(0o755)
    return None


def _open_dirs(top: Path) -> None:
    """Directories copied from under a private tree keep its 0700: open them to users."""
    for d, _, _ in os.walk(top):
        os.chmod(d, 0o755)
