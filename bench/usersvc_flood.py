"""The user service under abuse (issue 30) — budget: while one user floods it with silent and
slow connections, another user's `dacctl status` is answered within 1 s p99: the round trip
from the credential's making to the answer (`user_client.ask`), which is what the service
decides. The whole command (Python's start-up and imports besides) is measured too, quiet and
flooded: what the flood adds to it is the round trip's share.

A local DAC (1 server, 4 bricks); uid 1234 owns the persistent buffer `abuf`. uid 5678 runs two
flooders (the system python3, as that uid): one opens connections as fast as it can and holds
up to HOLD of them silent, reopening each the service drops; the other holds SLOW connections
that send one byte every 0.2 s. Meanwhile uid 1234 runs `DIR/bin/dacctl status abuf --line` N
times in a row (the whole command: Python start-up, imports, munge, the round trip), and then
`user_client.ask` N times in one process (the round trip alone). The same is measured without
the flood first. Prints the figures, then PASS or FAIL on the round trip's p99.

    .venv/bin/python bench/usersvc_flood.py [--n 60] [--hold 3000] [--slow 300]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import local_dac, p99, percentiles, verdict  # noqa: E402

VICTIM, FLOODER = (1234, 4321), (5678, 8765)
BUDGET = 1.0
PYTHON = "/usr/bin/python3"

#: the flooder: argv host, port, silent connections to hold, slow ones, seconds
_FLOOD = r"""
import resource, selectors, signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
host, port, hold, slow, seconds = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:6])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
sel = selectors.DefaultSelector()
opened = dropped = 0
trickling = []
end = time.monotonic() + seconds

def connect():
    global opened
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect((host, port))
    except BlockingIOError:
        pass
    except OSError:
        s.close()
        return None
    opened += 1
    return s

def turn():
    global dropped
    while len(sel.get_map()) < hold + slow:
        s = connect()
        if s is None:
            break
        sel.register(s, selectors.EVENT_READ)
        if len(trickling) < slow:
            trickling.append(s)
    for key, _ in sel.select(0.01):  # the service answered or dropped one: open another
        try:
            key.fileobj.recv(4096)
        except OSError:
            pass
        sel.unregister(key.fileobj)
        if key.fileobj in trickling:
            trickling.remove(key.fileobj)
        key.fileobj.close()
        dropped += 1
    now = time.monotonic()
    if int(now * 5) != int((now - 0.01) * 5):  # a byte from each slow one, 5 times a second
        for s in trickling:
            try:
                s.send(b"M")
            except OSError:
                pass

try:
    while time.monotonic() < end:
        turn()
finally:
    print(opened, dropped)
"""

#: the victim's round trips: argv site-packages, n; prints the seconds of each
_ASK = r"""
import json, site, sys, time
site.addsitedir(sys.argv[1])
from daccore.settings.config import load_config
from daccore.services.user_client import ask
config = load_config()
out = []
for _ in range(int(sys.argv[2])):
    t = time.monotonic()
    ask(config, "status", {"buffer": "abuf"})
    out.append(time.monotonic() - t)
print(json.dumps(out))
"""


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


def commands(dacctl: str, env: dict, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.monotonic()
        r = as_user(VICTIM, [dacctl, "status", "abuf", "--line"], env)
        times.append(time.monotonic() - t)
        assert r.returncode == 0 and r.stdout.startswith("buffer abuf:"), r.stdout + r.stderr
    return times


def round_trips(env: dict, n: int) -> list[float]:
    r = as_user(VICTIM, [PYTHON, "-c", _ASK, sysconfig.get_paths()["purelib"], str(n)], env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def summary(name: str, times: list[float]) -> str:
    return f"{name}: {percentiles([t * 1000 for t in times])}"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--hold", type=int, default=3000)
    p.add_argument("--slow", type=int, default=300)
    args = p.parse_args()
    # 4 bricks: abuf (one brick) is within a user's quarter of the pool (persistent_caps)
    with local_dac(servers=1, bricks_per_server=4) as (state, env, work):
        subprocess.run(
            [
                str(Path(sys.executable).parent / "dacctl"),
                "create-persistent",
                "--name",
                "abuf",
                "--capacity",
                "1MiB",
                "--user",
                str(VICTIM[0]),
                "--group",
                str(VICTIM[1]),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        dacctl = str(work / "dac" / "bin" / "dacctl")
        user_env = {"PATH": "/usr/bin:/bin", "DAC_CONFIG": env["DAC_CONFIG"]}
        quiet = (commands(dacctl, user_env, args.n), round_trips(user_env, args.n * 10))
        host, port = state.users["address"].rsplit(":", 1)
        seconds = 3600  # until terminated
        flood = subprocess.Popen(
            [PYTHON, "-c", _FLOOD, host, port, str(args.hold), str(args.slow), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
            user=FLOODER[0],
            group=FLOODER[1],
            extra_groups=[],
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
        )
        try:
            time.sleep(3)  # the flood at its height: every connection it holds is open
            loud = (commands(dacctl, user_env, args.n), round_trips(user_env, args.n * 10))
        finally:
            flood.terminate()
            out = flood.communicate(timeout=30)[0].split()
    print(summary("quiet: dacctl status (whole command)", quiet[0]))
    print(summary("quiet: user_client.ask round trip", quiet[1]))
    print(summary("flood: dacctl status (whole command)", loud[0]))
    print(summary("flood: user_client.ask round trip", loud[1]))
    if len(out) == 2:
        print(
            f"flood: {out[0]} connections opened, {out[1]} answered or dropped by the service "
            f"({args.hold} silent and {args.slow} slow held at once)"
        )
    return verdict(
        "another user's dacctl status answered during the flood (round trip), p99",
        p99([t * 1000 for t in loud[1]]),
        BUDGET * 1000,
    )


if __name__ == "__main__":
    sys.exit(main())
