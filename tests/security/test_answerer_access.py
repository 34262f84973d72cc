"""dac's answerer (issue 34, dacservice/answerer/) against two real unprivileged users, A
(1234:4321) and B (5678:8765), with SlurmUser `slurm` (Debian's slurmctld package makes it)
and the answerer run as root, as a site runs it with SlurmUser root's or its own.

Neither user can reach the socket or list its directory; root and SlurmUser are answered; a
user let past the directory's mode (in SlurmUser's group) is still refused, by the peer's
credentials (SO_PEERCRED); forged, oversized, silent and garbage requests get one line each and
the answerer answers the next one. Each user's client is the system python3 under setpriv,
with no supplementary group unless one is given."""

import json
import os
import pwd
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from clitools import BIN
from fuzzrun import as_process, local_dac
from lua_answerer import raw_request

from dacservice.answerer.published import valid_name
from dacservice.answerer.wire import MAX_LINE, READ_TIMEOUT, ask

A, B = (1234, 4321), (5678, 8765)
SLURM_USER = "slurm"

#: a client of the answerer's wire format, run as a user: prints the reply, or the errno name
_CLIENT = r"""
import errno, os, socket, sys
path, request = sys.argv[1], sys.argv[2].encode()
try:
    names = os.listdir(os.path.dirname(path))
    print("LISTED", names)
except OSError as e:
    print("NOLIST", errno.errorcode[e.errno])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(path)
    try:
        s.sendall(request + b"\n")
    except BrokenPipeError:  # refused before the request was read: the reply is there
        pass
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:  # closed with our request unread (refused before reading
            if not data:  # it): the refusal came first, then the reset
                raise
            break
        if not chunk:
            break
        data += chunk
    print("REPLY", repr(data))
except OSError as e:
    print("CONNECT", errno.errorcode.get(e.errno, e.errno))
"""


@pytest.fixture(scope="module")
def answerer():
    """A local DAC (no Slurm) and an answerer on it, run as root with `slurm_user: slurm`, on
    a socket below a directory every user may enter; yields (socket path, process)."""
    assert os.geteuid() == 0, "the answerer's access tests need root (setpriv, a local DAC)"
    slurm = pwd.getpwnam(SLURM_USER)  # make deps installs slurmctld, which makes the account
    with local_dac() as (workdir, env):
        config = yaml.safe_load((workdir / "dac.yaml").read_text())
        config["slurm_user"] = SLURM_USER
        path = workdir / "answerer.yaml"
        path.write_text(yaml.safe_dump(config))
        top = workdir / "answerer-top"
        top.mkdir(mode=0o755)
        top.chmod(0o755)
        sock = top / "run" / "socket"
        job = workdir / "job31.sh"  # user A's job buffer: its paths file (published.py)
        job.write_text("#!/bin/sh\n#DW jobdw capacity=100MiB access_mode=striped\n")
        made = as_process(
            ["--function", "setup", "--token", "31", "--caller", "SLURM", "--user", str(A[0]),
             "--groupid", str(A[1]), "--capacity", "default:100MiB", "--job", str(job)],
            {**env, "DAC_CONFIG": str(path)},
        )  # fmt: skip
        assert made[0] == 0, made
        log = open(workdir / "answerer.log", "ab")
        proc = subprocess.Popen(
            [str(BIN / "dac-answerer"), "--socket", str(sock)],
            env={**os.environ, **env, "DAC_CONFIG": str(path)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 20
            while not _fresh(sock):
                assert proc.poll() is None, (workdir / "answerer.log").read_text()
                assert time.monotonic() < deadline, "the answerer never became current"
                time.sleep(0.05)
            assert slurm.pw_uid != 0
            yield sock, proc
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            log.close()


def _fresh(sock: Path) -> bool:
    try:
        return json.loads(ask(str(sock), "stats", [])[2])["fresh"]
    except (OSError, ValueError, IndexError):
        return False


def _ids(user, groups: str) -> list[str]:
    """setpriv's options for (uid, gid), with `groups` as its only supplementary ones."""
    ids = [f"--reuid={user[0]}", f"--regid={user[1]}"]
    return ids + ([f"--groups={groups}"] if groups else ["--clear-groups"])


def _as(user, sock: Path, request: str, groups: str = "") -> dict[str, str]:
    """The client above run as `user` ((uid, gid) or a name); {LISTED|NOLIST, REPLY|CONNECT}."""
    if isinstance(user, str):
        pw = pwd.getpwnam(user)
        user = (pw.pw_uid, pw.pw_gid)
    ids = _ids(user, groups)
    r = subprocess.run(
        ["/usr/bin/setpriv", *ids, "/usr/bin/python3", "-I", "-c", _CLIENT, str(sock), request],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert r.returncode == 0, r.stderr
    return dict(line.split(" ", 1) for line in r.stdout.splitlines())


def test_answerer_users_can_neither_reach_its_socket_nor_list_its_directory(answerer):
    sock, _ = answerer
    slurm = pwd.getpwnam(SLURM_USER)
    st = os.stat(sock.parent)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, slurm.pw_gid, 0o750)
    st = os.stat(sock)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, slurm.pw_gid, 0o660)
    for user in (A, B):
        seen = _as(user, sock, "dac-answer/1 stats")
        assert seen == {"NOLIST": "EACCES", "CONNECT": "EACCES"}, (user, seen)


def _read_as(user, path: Path, groups: str = "") -> str:
    """ "READ <bytes>" or the errno's name, for `user` opening `path` to read."""
    ids = _ids(user, groups)
    code = (
        "import errno, sys\n"
        "try:\n    print('READ', len(open(sys.argv[1], 'rb').read()))\n"
        "except OSError as e:\n    print(errno.errorcode[e.errno])\n"
    )
    r = subprocess.run(
        ["/usr/bin/setpriv", *ids, "/usr/bin/python3", "-I", "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_answerer_pools_file_is_closed_to_users_and_read_by_slurm_user(answerer):
    """The pools file burst_buffer.lua reads instead of asking (publisher.py): in the socket's
    directory, 0640 with SlurmUser's group; neither user may read it, nor replace it."""
    sock, _ = answerer
    slurm = pwd.getpwnam(SLURM_USER)
    pools = sock.parent / "pools"
    deadline = time.monotonic() + 5
    while not pools.exists():
        assert time.monotonic() < deadline, "the answerer wrote no pools file"
        time.sleep(0.05)
    st = os.stat(pools)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, slurm.pw_gid, 0o640)
    for user in (A, B):
        assert _read_as(user, pools) == "EACCES", user
    assert _read_as((slurm.pw_uid, slurm.pw_gid), pools).startswith("READ ")
    # a user in SlurmUser's group reads what `scontrol show bbstat` shows anyone, and cannot
    # change it: the directory is 0750
    assert _read_as(A, pools, groups=str(slurm.pw_gid)).startswith("READ ")
    seen = _as(A, sock, "dac-answer/1 stats", groups=str(slurm.pw_gid))
    assert "pools" in seen["LISTED"]


def test_answerer_paths_files_are_closed_to_users_and_read_by_slurm_user(answerer):
    """The paths files burst_buffer.lua reads at a job's start (published.py): a directory
    in the socket's, with its owner, group and mode; each file 0640 with SlurmUser's group.
    Neither user, not even the job's owner, may list them, read them or put one there."""
    sock, _ = answerer
    slurm = pwd.getpwnam(SLURM_USER)
    paths = sock.parent / "paths"
    mine = paths / "31"
    deadline = time.monotonic() + 5
    while not mine.exists():
        assert time.monotonic() < deadline, "the answerer wrote no paths file for job 31"
        time.sleep(0.05)
    st = os.stat(paths)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, slurm.pw_gid, 0o750)
    st = os.stat(mine)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, slurm.pw_gid, 0o640)
    assert mine.read_bytes().startswith(b"dac-paths/1 ")
    for user in (A, B):
        assert _read_as(user, mine) == "EACCES", user
        assert _read_as(user, paths / "32") == "EACCES", user  # nor learn which jobs have one
    assert _read_as((slurm.pw_uid, slurm.pw_gid), mine).startswith("READ ")
    for user in (A, B):  # in SlurmUser's group (as for the pools file): read, never written
        r = subprocess.run(
            ["/usr/bin/setpriv", *_ids(user, str(slurm.pw_gid)), "/usr/bin/python3", "-I", "-c",
             "import sys; open(sys.argv[1], 'wb')", str(paths / "33")],
            capture_output=True, text=True, timeout=30, cwd="/",
        )  # fmt: skip
        assert r.returncode != 0 and "PermissionError" in r.stderr, r
    assert not (paths / "33").exists()


def test_answerer_valid_files_hold_scripts_for_slurm_user_alone(answerer, tmp_path):
    """The valid files burst_buffer.lua reads instead of asking job_process (published.py)
    hold a user's job script: 0600 and SlurmUser's, so neither user reads one, not even in
    SlurmUser's group; SlurmUser does."""
    sock, _ = answerer
    slurm = pwd.getpwnam(SLURM_USER)
    data = b"#!/bin/sh\n#DW jobdw capacity=100MiB access_mode=striped\necho secret-token\n"
    job = tmp_path / "job.sh"
    job.write_bytes(data)
    valid = sock.parent / "valid" / valid_name(f"--user {A[0]}", data)
    deadline = time.monotonic() + 10
    while not valid.exists():  # kept once the answer is valid (and the mirror stood still)
        assert time.monotonic() < deadline, "the answerer wrote no valid file"
        reply = ask(str(sock), "job_process", ["--job", str(job), "--user", str(A[0])], script=data)
        assert reply[:2] == ("ANSWER", 0), reply
        time.sleep(0.2)
    st = os.stat(sock.parent / "valid")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, slurm.pw_gid, 0o750)
    st = os.stat(valid)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (slurm.pw_uid, slurm.pw_gid, 0o600)
    for user in (A, B):
        assert _read_as(user, valid) == "EACCES", user
        assert _read_as(user, valid, groups=str(slurm.pw_gid)) == "EACCES", user
    assert _read_as((slurm.pw_uid, slurm.pw_gid), valid) == f"READ {len(valid.read_bytes())}"


def test_answerer_answers_root_and_slurm_user(answerer):
    sock, _ = answerer
    assert ask(str(sock), "stats", [])[:2] == ("ANSWER", 0)
    seen = _as(SLURM_USER, sock, "dac-answer/1 pools")
    assert "socket" in seen["LISTED"]
    assert seen["REPLY"].startswith("b'ANSWER 0 ") and '"pools"' in seen["REPLY"], seen


def test_answerer_refuses_a_user_let_past_the_directory_by_its_credentials(answerer):
    # uid A in SlurmUser's group passes the directory's and the socket's modes: SO_PEERCRED
    # still tells the answerer it is uid 1234, and it is refused before its request is read
    sock, _ = answerer
    before = json.loads(ask(str(sock), "stats", [])[2]).get("refused_peer", 0)
    seen = _as(A, sock, "dac-answer/1 pools", groups=str(pwd.getpwnam(SLURM_USER).pw_gid))
    assert seen["REPLY"] == repr(b"REFUSE only root and SlurmUser may ask\n")
    assert json.loads(ask(str(sock), "stats", [])[2])["refused_peer"] == before + 1


@pytest.mark.parametrize(
    "request_, reply",
    [
        (b"hello\n", b"REFUSE not a dac-answer/1 or /2 request\n"),
        (b"dac-answer/1\n", b"REFUSE not a dac-answer/1 or /2 request\n"),
        (b"dac-answer/3 pools\n", b"REFUSE not a dac-answer/1 or /2 request\n"),
        (
            b"\xff\xfe\x00\x1b]0;pwned\x07 dac-answer/1 pools\n",
            b"REFUSE not a dac-answer/1 or /2 request\n",
        ),
        (
            b"dac-answer/1 pools" + b"A" * (MAX_LINE + 10),
            b"REFUSE not a dac-answer/1 or /2 request\n",
        ),
        (
            b"dac-answer/1 setup --token 7 --caller SLURM --user 0 --groupid 0 --job /etc/hosts\n",
            b"REFUSE only job_process, pools, paths and bbstat are answered here\n",
        ),
        (
            b"dac-answer/1 teardown --token 7 --hurry\n",
            b"REFUSE only job_process, pools, paths and bbstat are answered here\n",
        ),
        (
            b"dac-answer/1 --function\n",
            b"REFUSE only job_process, pools, paths and bbstat are answered here\n",
        ),
        (b"", b"REFUSE not a dac-answer/1 or /2 request\n"),
        (
            b"dac-answer/2 setup script:4 --token 7 --caller SLURM --user 0 --groupid 0\nabcd",
            b"REFUSE only job_process carries a script, of at most 65536 bytes\n",
        ),
        (
            b"dac-answer/2 job_process script:99999999999 --job /etc/shadow\n",
            b"REFUSE only job_process carries a script, of at most 65536 bytes\n",
        ),
        (
            b"dac-answer/2 job_process script:-1 --job /etc/shadow\n",
            b"REFUSE only job_process carries a script, of at most 65536 bytes\n",
        ),
        (b"dac-answer/2 job_process script:9 --job /x\nabc", b"REFUSE a job script cut short\n"),
        (
            b"dac-answer/2 job_process reply:pathfile --job /etc/shadow\n",
            b"REFUSE only paths replies with its path file's lines\n",
        ),
        (
            b"dac-answer/2 paths caller:0:0 --token 7 --pathfile /root/x\n",
            b"REFUSE only bbstat names its caller\n",
        ),
        (
            b"dac-answer/1 bbstat 42\n",
            b"REFUSE bbstat names its caller: dac-answer/2 bbstat caller:[<uid>:<gid>]\n",
        ),
    ],
    ids=[
        "garbage",
        "no-function",
        "other-version",
        "control-bytes",
        "oversized",
        "setup",
        "teardown",
        "option-as-function",
        "empty",
        "script-on-setup",
        "script-oversized",
        "script-negative",
        "script-cut-short",
        "pathfile-reply-on-job-process",
        "caller-on-paths",
        "bbstat-without-caller",
    ],
)
def test_answerer_refuses_forged_and_garbage_requests_in_one_line(answerer, request_, reply):
    sock, proc = answerer
    assert raw_request(sock, request_, shut=True) == reply
    assert proc.poll() is None and ask(str(sock), "stats", [])[:2] == ("ANSWER", 0)


def test_answerer_answers_forged_arguments_with_dacctls_own_one_line_refusal(answerer, tmp_path):
    # the three functions' arguments go through dacctl's own checks (slurm_args.py): a
    # user's file as the job script, a token with a newline, a path file in a user's directory
    sock, proc = answerer
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    os.chown(user_dir, *A)
    script = user_dir / "job.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=1GiB access_mode=striped pool=default\n")
    os.chown(script, *A)
    for function, args in (
        ("job_process", ["--job", str(script)]),
        ("paths", ["--token", "7\n8", "--job", "/etc/hosts", "--pathfile", "/tmp/p"]),
        ("paths", ["--token", "7", "--job", "/etc/hosts", "--pathfile", f"{user_dir}/p"]),
    ):
        kind, rc, out, err = ask(str(sock), function, args)
        assert (kind, rc) == ("ANSWER", 1), (function, args, out, err)
        assert out.count("\n") <= 1 and out.strip(), (function, args, out)
    assert not (user_dir / "p").exists() and not Path("/tmp/p").exists()
    assert proc.poll() is None


def test_answerer_drops_a_silent_connection_and_keeps_answering(answerer):
    sock, proc = answerer
    started = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.settimeout(READ_TIMEOUT + 5)
        silent.connect(str(sock))
        assert ask(str(sock), "stats", [])[:2] == ("ANSWER", 0)  # answered meanwhile
        reply = silent.recv(4096)
    assert reply == b"REFUSE not a dac-answer/1 or /2 request\n"
    assert time.monotonic() - started < READ_TIMEOUT + 2
    assert proc.poll() is None
