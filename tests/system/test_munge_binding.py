"""daccore.services.munge, libmunge in-process, against a real munged (one per test, on a
socket of its own, as the local DAC starts it) and the `munge`/`unmunge` programs it stands in
for: what one end makes the other reads, the uid is the maker's and nobody else's, and munged's
refusals (replayed, altered, another key, unreachable) come back as the service has always
said them. The user service's decode (dacservice.users.decode_origin) is checked both ways:
through the library and through `unmunge`, the fallback where libmunge cannot be loaded."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from daccore.errors import AdminError, UserError
from daccore.services import munge
from daccore.services.user_client import MAGIC, credential_for
from dacservice import users

B = (5678, 8765)


def _munged(top: Path) -> tuple[subprocess.Popen, str]:
    top.mkdir(parents=True, exist_ok=True)
    top.chmod(0o755)  # another uid reaches the socket
    key = top / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    proc = subprocess.Popen(
        [
            "munged",
            "--foreground",
            "--force",
            f"--socket={top}/munge.socket",
            f"--key-file={key}",
            f"--pid-file={top}/munged.pid",
            f"--log-file={top}/munged.log",
            f"--seed-file={top}/munged.seed",
            "--origin=127.0.0.1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not (top / "munge.socket").exists():
        assert time.monotonic() < deadline and proc.poll() is None, "munged did not start"
        time.sleep(0.02)
    return proc, str(top / "munge.socket")


@pytest.fixture
def munged(open_dir):
    proc, sock = _munged(open_dir / "munge")
    yield sock
    proc.terminate()
    proc.wait(10)


def _request(verb="pools", **args) -> bytes:
    return json.dumps({"magic": MAGIC, "verb": verb, "args": args}).encode()


def test_libmunge_loads_where_munge_is():
    assert munge.available(), "libmunge.so.2 (Debian's libmunge2) did not load"


def test_what_the_library_makes_unmunge_reads_and_the_other_way(munged):
    payload = _request("status", buffer="x")
    cred = munge.encode(payload, munged)
    assert cred.startswith(b"MUNGE:") and cred.endswith(b":")
    r = subprocess.run(
        ["unmunge", f"--socket={munged}"], input=cred, capture_output=True, check=True
    )
    meta, _, body = r.stdout.partition(b"\n\n")
    assert body == payload and b"UID:" in meta and b"(0)" in meta
    made = subprocess.run(
        ["munge", f"--socket={munged}", "-s", payload.decode()], capture_output=True, check=True
    ).stdout.strip()
    uid, gid, origin, body = munge.decode(made, munged)
    assert (uid, gid, origin, body) == (os.getuid(), os.getgid(), "127.0.0.1", payload)


def test_a_round_trip_keeps_the_payload_the_uid_and_the_origin(munged):
    for payload in (b"", b"x", _request(), bytes(range(1, 256)) * 4):
        uid, gid, origin, body = munge.decode(munge.encode(payload, munged), munged)
        assert (uid, gid, origin, body) == (os.getuid(), os.getgid(), "127.0.0.1", payload)


def test_a_credential_is_refused_the_second_time_and_altered(munged):
    cred = munge.encode(_request(), munged)
    munge.decode(cred, munged)
    with pytest.raises(munge.MungeRefused, match="^Replayed credential$") as e:
        munge.decode(cred, munged)
    assert e.value.code == 17
    fresh = munge.encode(_request(), munged)
    middle = len(fresh) // 2
    altered = fresh[:middle] + (b"A" if fresh[middle] != ord("A") else b"B") + fresh[middle + 1 :]
    with pytest.raises(munge.MungeRefused) as e:
        munge.decode(altered, munged)
    assert "Replayed" not in str(e.value)
    with pytest.raises(munge.MungeRefused):
        munge.decode(fresh[:20] + b"\0" + fresh[21:], munged)  # C would stop at the NUL


def test_a_credential_of_another_munge_key_is_refused(munged, open_dir):
    proc, other = _munged(open_dir / "other-munge")
    try:
        foreign = munge.encode(_request(), other)
    finally:
        proc.terminate()
        proc.wait(10)
    with pytest.raises(munge.MungeRefused):
        munge.decode(foreign, munged)


def test_a_credential_made_by_another_uid_says_that_uid_and_no_other(munged, open_dir):
    """User B makes a credential with the library in a process of its own (setpriv, as B;
    the module alone, copied where B can read it): it decodes as B's uid and gid; the service
    believes nothing else about the caller."""
    shutil.copy(munge.__file__, open_dir / "b_munge.py")
    (open_dir / "b_munge.py").chmod(0o644)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from b_munge import encode; "
        "sys.stdout.buffer.write(encode(sys.argv[2].encode(), sys.argv[3]))"
    )
    r = subprocess.run(
        [
            "setpriv",
            f"--reuid={B[0]}",
            f"--regid={B[1]}",
            "--clear-groups",
            "/usr/bin/python3",
            "-I",
            "-c",
            code,
            str(open_dir),
            _request("stage-list", job="7").decode(),
            munged,
        ],
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    uid, gid, request = users.decode(r.stdout, munged)
    assert (uid, gid) == B and request["args"] == {"job": "7"}
    with pytest.raises(UserError, match="^credential refused: Replayed credential$"):
        users.decode(r.stdout, munged)


@pytest.mark.parametrize("path", ["library", "programs"])
def test_the_service_decodes_alike_through_the_library_and_unmunge(munged, path, monkeypatch):
    if path == "programs":
        monkeypatch.setattr(munge, "_LOADED", [None])
    cred = credential_for(_request("status", buffer="b").decode(), munged)
    uid, gid, origin, request = users.decode_origin(cred, munged)
    assert (uid, gid, origin) == (os.getuid(), os.getgid(), "127.0.0.1")
    assert request == {"magic": MAGIC, "verb": "status", "args": {"buffer": "b"}}
    with pytest.raises(UserError, match="^credential refused: Replayed credential$"):
        users.decode_origin(cred, munged)
    other = credential_for(json.dumps({"magic": "x", "verb": "pools"}), munged)
    with pytest.raises(UserError, match="^credential refused: its payload is not a dac request$"):
        users.decode_origin(other, munged)


def test_munged_unreachable_is_one_line_naming_the_admin(open_dir, monkeypatch):
    gone = str(open_dir / "no" / "munge.socket")
    for loaded in (True, False):
        monkeypatch.setattr(munge, "_LOADED", [] if loaded else [None])
        with pytest.raises(AdminError) as e:
            credential_for("{}", gone)
        line = str(e.value)
        assert line.startswith("munge cannot make a credential here: ") and "\n" not in line
        assert line.endswith("(an admin must start munged on this host)")
    monkeypatch.setattr(munge, "_LOADED", [])
    with pytest.raises(munge.MungeUnreachable, match="Failed to access"):
        munge.decode(b"MUNGE:xyz:", gone)
    with pytest.raises(AdminError, match="^the user service cannot reach munged: "):
        users.decode_origin(b"MUNGE:xyz:", gone)


def test_dac_libmunge_none_takes_the_programs_path(monkeypatch):
    monkeypatch.setattr(munge, "_LOADED", [])
    monkeypatch.setenv("DAC_LIBMUNGE", "none")
    assert not munge.available()
    monkeypatch.setattr(munge, "_LOADED", [])
    monkeypatch.setenv("DAC_LIBMUNGE", "/nonexistent/libmunge.so.2")
    assert not munge.available()
    monkeypatch.setattr(munge, "_LOADED", [])
    monkeypatch.delenv("DAC_LIBMUNGE")
    assert munge.available()
