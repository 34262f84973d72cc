"""Running the fuzz cases (tests/fuzzgen.py): dacctl in this process, as its entry point does,
or as the installed command; shared by tests/system/test_fuzz_*.py and bench/fuzz.py."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def in_process(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """`dacctl argv` in this process: the entry point's own function (dacctl.main.main, which
    hands `--function` to dacctl.datawarp.run), its output captured. An exception that gets
    out of it would have been a traceback: it is returned as one on stderr."""
    from dacctl.main import main

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(argv))
            except SystemExit as e:  # click's --help and --version, with standalone off
                rc = e.code if isinstance(e.code, int) else 1
            except BaseException:  # noqa: BLE001 - what escapes is the finding
                import traceback

                traceback.print_exc()
                rc = 99
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rc, out.getvalue(), err.getvalue()


def as_process(argv: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str, str]:
    """`dacctl argv` as the installed command; bytes that are not UTF-8 shown escaped."""
    r = subprocess.run(
        [str(BIN / "dacctl"), *argv],
        capture_output=True,
        env={**os.environ, **env},
        timeout=timeout,
    )
    return (
        r.returncode,
        r.stdout.decode("utf-8", "backslashreplace"),
        r.stderr.decode("utf-8", "backslashreplace"),
    )


@contextlib.contextmanager
def local_dac(bricks_per_server: int = 2):
    """A local DAC of 2 servers x `bricks_per_server` bricks of 512 MiB in a directory users
    can enter; yields (workdir, env for dacctl); always torn down."""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="dac-fuzz-"))
    top.chmod(0o755)
    workdir = top / "dac"
    try:
        _dacctl(
            "local",
            "up",
            "--workdir",
            str(workdir),
            "--servers",
            "2",
            "--bricks-per-server",
            str(bricks_per_server),
            "--brick-size",
            "512MiB",
        )
        yield workdir, {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
    finally:
        _dacctl("local", "down", "--workdir", str(workdir), check=False)
        shutil.rmtree(top, ignore_errors=True)


def _dacctl(*args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    r = subprocess.run(
        [str(BIN / "dacctl"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    if check and r.returncode:
        raise RuntimeError(f"dacctl {' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r.stdout


def make_scratch(directory: Path) -> str:
    """Fill `directory` with fuzzgen.scratch_files; returns its path."""
    from fuzzgen import scratch_files

    for name, data in scratch_files(str(directory)).items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return str(directory)
