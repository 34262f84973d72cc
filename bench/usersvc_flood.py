"""The user service under one user's flood (issues 30 and 45).

Budgets:
- issue 30: while one user holds silent and slow connections open, another user's round trip
  (`user_client.ask`: the credential's making to the answer, what the service decides) is
  answered within 1 s p99;
- issue 45: while one user floods the service with forged credentials, with held half-lines or
  with requests whose replies it never reads, 10 of 10 of other users' whole `dacctl pools`
  commands answer within 3 s, for each kind of flood.

A local DAC (1 server, 4 bricks); uid 1234 owns the persistent buffer `abuf`. The flooder is
uid 5678, one process of the system python3, as fast as it can (`_FLOOD`):
- `silent`: HOLD connections that send nothing and SLOW that send a byte every 0.2 s;
- `forged`: credentials forged from the flooder's own (one base64 character of its sealed part
  changed, so munged must decode it to refuse it: it passes every check short of unmunge), one
  per new connection, as fast as it can, never read; FORGED held open, the oldest closed past
  that;
- `halflines`: HALFLINES connections, each holding the start of a credential and no newline;
- `unread`: a fresh valid credential of the flooder's (`pools`) on a new connection, as fast as
  libmunge makes them, the reply never read; UNREAD held open, the oldest closed past that.
Each flood kind runs alone. Meanwhile uids 1234 and 2468 run `DIR/bin/dacctl pools` 10 times
in turn (the whole command: Python's start-up, imports, munge, the round trip) and each is
timed; then uid 1234's round trip alone, 50 times (what the service's share of it is). The
same commands are timed without a flood first. The load average is printed beside each figure.

    .venv/bin/python bench/usersvc_flood.py [--kinds silent,forged,halflines,unread]
        [--n 30] [--hold 3000] [--slow 300] [--forged 3000] [--halflines 20000]
        [--unread 2000] [--commands 10] [--processes 1] [--service FILE]

`--processes N` runs each flood in N processes of the flooder's (a process has at most the
hard descriptor limit: N x 20,000 held half-lines go past what the service can hold here).
`--service FILE` runs the user service from FILE (a tree's dacservice/users/__init__.py, say
from `git archive REV dacservice | tar -x -C TREE`) instead of the installed one, for a before
and after.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import local_dac, p99, percentiles, steal_meter, verdict  # noqa: E402

VICTIMS = [(1234, 4321), (2468, 8642)]
FLOODER = (5678, 8765)
BUDGET = 1.0  # issue 30: the round trip's p99, seconds
COMMAND_BUDGET = 3.0  # issue 45: each of another user's dacctl pools, seconds
PYTHON = "/usr/bin/python3"

#: the flooder: argv kind, host, port, count, slow, seconds, site-packages, munge socket.
#: Prints its figures as one JSON line when terminated.
_FLOOD = r"""
import base64, collections, errno, json, os, random, resource, selectors, signal, site, socket
import sys, time
kind, host, port, count, slow, seconds = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
site.addsitedir(sys.argv[7])
munge_socket = sys.argv[8]
OPEN_LOOP = {"forged": 64, "unread": 1}  # kinds never read, and connections opened a turn
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
sel = selectors.DefaultSelector()
held = collections.deque()  # unread: sent, never read
trickling = []
n = collections.Counter()
connected = peak = 0
end = time.monotonic() + seconds

def credential():
    from daccore.services.munge import encode
    payload = json.dumps({"magic": "dac-user/1", "verb": "pools", "args": {}}).encode()
    return encode(payload, munge_socket)

if kind == "forged":
    real = credential()
    body = real[len(b"MUNGE:"):-1]
    B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

def line():
    if kind == "forged":  # past the outer header (version, cipher, MAC and zip types, IV)
        i = random.randrange(len(body) // 2, len(body) - 4)
        c = B64[(B64.index(body[i]) + random.randrange(1, 64)) % 64]
        return b"MUNGE:" + body[:i] + bytes([c]) + body[i + 1:] + b":\n"
    if kind == "halflines":
        return b"MUNGE:AwQFAAA" + base64.b64encode(os.urandom(30))
    if kind == "unread":
        return credential() + b"\n"
    return b""

def open_one():
    try:
        s = socket.socket()
    except OSError:  # out of descriptors: every one this process may have is a connection
        n["no descriptor"] += 1
        return False
    if kind == "unread":  # as small a window as the kernel allows: no reply fits in it
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
    s.setblocking(False)
    e = s.connect_ex((host, port))
    if e not in (0, errno.EINPROGRESS):
        s.close()
        n["refused"] += 1
        return False
    n["opened"] += 1
    sel.register(s, selectors.EVENT_WRITE)
    return True

def close(s):
    global connected
    sel.unregister(s)
    s.close()
    connected -= 1

def writable(s):
    global connected, peak
    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
        sel.unregister(s)
        s.close()
        n["failed"] += 1
        return
    connected += 1
    peak = max(peak, connected)
    data = line()
    if data:
        try:
            s.send(data)
            n["sent"] += 1
        except OSError:
            return close(s)
    if kind in OPEN_LOOP:  # never read: kept open, the oldest closed past `count`
        sel.unregister(s)
        held.append(s)
        while len(held) > count:
            old = held.popleft()
            old.close()
            connected -= 1
        return
    if kind == "silent" and len(trickling) < slow:
        trickling.append(s)
    sel.modify(s, selectors.EVENT_READ)

def readable(s):
    try:
        data = s.recv(4096)
    except OSError:
        data = b""
    n["answers" if data else "dropped"] += 1
    if s in trickling:
        trickling.remove(s)
    close(s)

last_trickle = 0.0
while not stop and time.monotonic() < end:
    if kind in OPEN_LOOP:  # as fast as lines are made (unread: a munged round trip each)
        want = min(OPEN_LOOP[kind], 512 - len(sel.get_map()))
    else:  # the number held, refilled
        want = count + slow - len(sel.get_map())
    for _ in range(max(0, min(want, 512))):
        if not open_one():
            time.sleep(0.01)
            break
    for key, ev in sel.select(0 if kind in OPEN_LOOP else 0.01):
        if ev & selectors.EVENT_WRITE:
            writable(key.fileobj)
        else:
            readable(key.fileobj)
    now = time.monotonic()
    if trickling and now - last_trickle >= 0.2:
        last_trickle = now
        for s in trickling:
            try:
                s.send(b"M")
            except OSError:
                pass
limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
print(json.dumps({**n, "connected_peak": peak, "connected_now": connected, "fd_limit": limit}))
"""

#: the victim's round trips: argv site-packages, n; prints the seconds of each answered one and
#: the lines of those refused
_ASK = r"""
import json, site, sys, time
site.addsitedir(sys.argv[1])
from daccore.errors import DacError
from daccore.settings.config import load_config
from daccore.services.user_client import ask
config = load_config()
out, refused = [], []
for _ in range(int(sys.argv[2])):
    t = time.monotonic()
    try:
        ask(config, "status", {"buffer": "abuf"})
        out.append(time.monotonic() - t)
    except DacError as e:
        refused.append(str(e))
print(json.dumps([out, refused]))
"""

#: the user service from another file (argv: the file), started as dac-user-service starts it;
#: `serve`, which a file from before dac-user-service has too
_SERVICE_FROM = (
    "import importlib.util, logging, sys; "
    "spec = importlib.util.spec_from_file_location('dacservice.users', sys.argv.pop(1)); "
    "m = importlib.util.module_from_spec(spec); sys.modules['dacservice.users'] = m; "
    "spec.loader.exec_module(m); from daccore.settings.config import load_config; "
    "logging.basicConfig(level=logging.INFO, "
    "format='%(asctime)s dac-user-service[%(process)d] %(message)s'); m.serve(load_config())"
)


def load() -> str:
    return "load " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


def as_user(user, argv, env, timeout=120):
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        user=user[0],
        group=user[1],
        extra_groups=[],
        cwd="/",
        env=env,
    )


def statuses(dacctl: str, env: dict, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.monotonic()
        r = as_user(VICTIMS[0], [dacctl, "status", "abuf", "--line"], env)
        times.append(time.monotonic() - t)
        assert r.returncode == 0 and r.stdout.startswith("buffer abuf:"), r.stdout + r.stderr
    return times


def pools(dacctl: str, env: dict, n: int) -> list[tuple[float, str]]:
    """(seconds, '' or why it failed) of `n` dacctl pools, the victims in turn."""
    out = []
    for i in range(n):
        t = time.monotonic()
        try:
            r = as_user(VICTIMS[i % len(VICTIMS)], [dacctl, "pools"], env, timeout=60)
            why = "" if r.returncode == 0 and r.stdout.startswith("POOL") else r.stderr.strip()
        except subprocess.TimeoutExpired:
            why = "no answer within 60 s"
        out.append((time.monotonic() - t, why))
    return out


def round_trips(env: dict, n: int) -> tuple[list[float], list[str]]:
    """(seconds of each answered round trip of `n`, the lines of those refused)."""
    r = as_user(VICTIMS[0], [PYTHON, "-c", _ASK, sysconfig.get_paths()["purelib"], str(n)], env)
    assert r.returncode == 0, r.stderr
    times, refused = json.loads(r.stdout)
    return times, refused


def answered(trips: tuple[list[float], list[str]]) -> list[float]:
    """The round trips' seconds; every one must have been answered."""
    assert not trips[1], trips[1]
    return trips[0]


def summary(name: str, times: list[float]) -> str:
    return f"{name}: {percentiles([t * 1000 for t in times])}"


def within(runs: list[tuple[float, str]]) -> tuple[int, float, list[str]]:
    """(answered within the budget, the worst seconds, the failures' lines)."""
    ok = sum(1 for t, why in runs if not why and t <= COMMAND_BUDGET)
    return ok, max(t for t, _ in runs), sorted({why for _, why in runs if why})


class Flood:
    """One flood kind, run by FLOODER in `processes` processes (`count` and `slow` each) until
    stopped; their figures, summed, once stopped."""

    def __init__(
        self, kind: str, address: str, count: int, slow: int, munge_socket: str, processes: int = 1
    ):
        host, port = address.rsplit(":", 1)
        limit = count + slow + 512

        def descriptors() -> None:  # enough for the flood where root may raise the limit
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            if hard < limit:
                try:
                    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
                except ValueError:  # no CAP_SYS_RESOURCE: the flooder has the hard limit
                    pass

        argv = [PYTHON, "-c", _FLOOD, kind, host, port, str(count), str(slow), "3600"]
        argv += [sysconfig.get_paths()["purelib"], munge_socket]
        self.procs = [
            subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                user=FLOODER[0],
                group=FLOODER[1],
                extra_groups=[],
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
                preexec_fn=descriptors,
            )
            for _ in range(processes)
        ]

    def stop(self) -> dict:
        for proc in self.procs:
            proc.terminate()
        total: dict = {}
        for proc in self.procs:
            out, err = proc.communicate(timeout=60)
            try:
                figures = json.loads(out.splitlines()[-1])
            except (IndexError, ValueError):
                return {"flooder failed": err.strip()[-300:]}
            for k, v in figures.items():
                total[k] = v if k == "fd_limit" else total.get(k, 0) + v
        return total


def service_from(state, env: dict, work: Path, path: str) -> None:
    """The local DAC's user service replaced by one run from `path`, on the same address."""
    from daclocal.cluster import USER_SERVICE
    from daclocal.procs import spawn, stop_pid

    stop_pid(state.users["service"], USER_SERVICE)
    proc = spawn(
        [sys.executable, "-I", "-c", _SERVICE_FROM, str(Path(path).resolve())],
        work / "dac" / "logs" / "user-service-from-file.log",
        {k: v for k, v in env.items() if k in ("PATH", "DAC_CONFIG")},
    )
    state.users["service"] = proc.pid
    state.save()  # so that down stops it
    host, port = state.users["address"].rsplit(":", 1)
    import socket

    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, "the service did not start"
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)


def issue_30(args, dacctl: str, user_env: dict, address: str, munge_socket: str) -> int:
    quiet = (statuses(dacctl, user_env, args.n), answered(round_trips(user_env, args.n * 10)))
    quiet_load = load()
    flood = Flood("silent", address, args.hold, args.slow, munge_socket)
    try:
        time.sleep(3)  # the flood at its height: every connection it holds is open
        loud = (statuses(dacctl, user_env, args.n), answered(round_trips(user_env, args.n * 10)))
        loud_load = load()
    finally:
        figures = flood.stop()
    print(f"{summary('quiet: dacctl status (whole command)', quiet[0])} ({quiet_load})")
    print(summary("quiet: user_client.ask round trip", quiet[1]))
    print(f"{summary('silent: dacctl status (whole command)', loud[0])} ({loud_load})")
    print(summary("silent: user_client.ask round trip", loud[1]))
    print(f"silent: the flooder's figures: {json.dumps(figures)}")
    return verdict(
        "silent: another user's dacctl status answered (round trip), p99",
        p99([t * 1000 for t in loud[1]]),
        BUDGET * 1000,
    )


def issue_45(args, kind: str, dacctl: str, user_env: dict, address: str, munge: str) -> int:
    count = {"forged": args.forged, "halflines": args.halflines, "unread": args.unread}[kind]
    flood = Flood(kind, address, count, 0, munge, args.processes)
    try:
        time.sleep(5 if kind == "halflines" else 3)  # every connection it holds is open
        before = load()
        runs = pools(dacctl, user_env, args.commands)
        after = load()
        trips = round_trips(user_env, 50)
    finally:
        figures = flood.stop()
    ok, worst, failures = within(runs)
    times = " ".join(f"{t:.2f}" for t, _ in runs)
    print(f"{kind}: other users' dacctl pools (s): {times} ({before} -> {after})")
    print(
        summary(f"{kind}: another user's user_client.ask round trip", trips[0])
        + f", {len(trips[1])} refused{': ' + trips[1][0] if trips[1] else ''}"
    )
    print(f"{kind}: the flooder's figures: {json.dumps(figures)}")
    for why in failures:
        print(f"{kind}: failed: {why}")
    good = ok == len(runs)
    print(
        f"{kind}: {ok} of {len(runs)} answered within {COMMAND_BUDGET:.0f} s, worst "
        f"{worst:.2f} s, budget {len(runs)} of {len(runs)}: {'PASS' if good else 'FAIL'}"
    )
    return 0 if good else 1


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kinds", default="silent,forged,halflines,unread")
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--hold", type=int, default=3000)
    p.add_argument("--slow", type=int, default=300)
    p.add_argument("--forged", type=int, default=3000)
    p.add_argument("--halflines", type=int, default=20000)
    p.add_argument("--unread", type=int, default=2000)
    p.add_argument("--commands", type=int, default=10)
    p.add_argument("--processes", type=int, default=1, help="flooder processes, each the kind")
    p.add_argument("--service", help="run the user service from this file")
    args = p.parse_args()
    kinds = args.kinds.split(",")
    stolen = steal_meter()
    failed = 0
    # 4 bricks: abuf (one brick) is within a user's quarter of the pool (persistent_caps)
    with local_dac(servers=1, bricks_per_server=4) as (state, env, work):
        if args.service:
            service_from(state, env, work, args.service)
        dacctl_root = str(Path(sys.executable).parent / "dacctl")
        subprocess.run(
            [dacctl_root, "create-persistent", "--name", "abuf", "--capacity", "1MiB"]
            + ["--user", str(VICTIMS[0][0]), "--group", str(VICTIMS[0][1])],
            env=env,
            check=True,
            capture_output=True,
        )
        dacctl = str(work / "dac" / "bin" / "dacctl")
        user_env = {"PATH": "/usr/bin:/bin", "DAC_CONFIG": env["DAC_CONFIG"]}
        address = state.users["address"]
        from daccore.settings.config import load_config

        munge = load_config(env["DAC_CONFIG"], env={}).munge_socket
        if "silent" in kinds:
            failed |= issue_30(args, dacctl, user_env, address, munge)
        rest = [k for k in kinds if k != "silent"]
        if rest:
            quiet = pools(dacctl, user_env, args.commands)
            print(
                "quiet: other users' dacctl pools (s): "
                + " ".join(f"{t:.2f}" for t, _ in quiet)
                + f" ({load()})"
            )
        for kind in rest:
            failed |= issue_45(args, kind, dacctl, user_env, address, munge)
    print(stolen())
    return failed


if __name__ == "__main__":
    sys.exit(main())
