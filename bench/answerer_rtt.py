"""The answerer's round trip alone (issue 34): two dac-answerers of two source trees against
one local DAC's etcd, asked in turn by one client, A-B interleaved, so load hits both alike.

    .venv/bin/python bench/answerer_rtt.py TREE_A TREE_B [--rounds N] [--gap MS]

Each tree is a directory holding `dacservice`, `daccore` and `dacctl` (`git archive REV
dacservice daccore dacctl | tar -x -C TREE` for a commit; `.` for the checkout). `--gap`: the
idle time before each call (slurmctld's calls come apart, so the answerer is idle when asked;
0 asks back to back). Prints each hook's median and p99 client-side round trip per tree, and
the load. Needs root (the local DAC).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import hot_job, local_dac  # noqa: E402


def _ask(path: str, line: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        s.connect(path)
        s.sendall(line)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("trees", nargs=2)
    p.add_argument("--rounds", type=int, default=400)
    p.add_argument("--gap", type=float, default=5.0)
    a = p.parse_args()
    from dacservice.answerer.wire import MAGIC, ask, encode

    with local_dac() as (state, env, work):
        script = hot_job(str(Path(sys.executable).parent / "dacctl"), env, work)
        procs, socks = [], []
        for i, tree in enumerate(a.trees):
            sock = work / f"ans{i}" / "socket"
            code = (
                f"import sys; sys.path.insert(0, {os.path.abspath(tree)!r}); "
                "import dacservice.answerer as m; "
                f"assert m.__file__.startswith({os.path.abspath(tree)!r}), m.__file__; "
                "sys.exit(m.main())"
            )
            log = open(work / f"ans{i}.log", "ab")
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", code, "--socket", str(sock)],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            socks.append(str(sock))
        deadline = time.monotonic() + 30
        import json

        for i, sock in enumerate(socks):
            while True:
                try:
                    if json.loads(ask(sock, "stats", [])[2])["fresh"]:
                        break
                except (OSError, ValueError, IndexError):
                    pass
                assert procs[i].poll() is None and time.monotonic() < deadline, "no answerer"
                time.sleep(0.05)
        calls = {
            "job_process": ["job_process", "--job", str(script)],
            "pools": ["pools"],
            "paths": [
                "paths",
                "--token",
                "7",
                "--job",
                str(script),
                "--pathfile",
                str(work / "paths"),
            ],
        }
        lines = {
            n: (" ".join([MAGIC, *(encode(w) for w in c)]) + "\n").encode()
            for n, c in calls.items()
        }
        for line in lines.values():  # both trees answer alike, from memory
            replies = {_ask(s, line) for s in socks}
            assert len(replies) == 1 and next(iter(replies)).startswith(b"ANSWER 0"), replies
        times: dict[tuple[int, str], list[float]] = {(t, n): [] for t in range(2) for n in calls}
        before = os.getloadavg()
        for r in range(a.rounds):
            for name, line in lines.items():
                for t in (0, 1) if r % 2 == 0 else (1, 0):
                    if name == "paths":  # Slurm hands paths an empty file: so does this
                        open(work / "paths", "w").close()
                    time.sleep(a.gap / 1000)
                    t0 = time.perf_counter()
                    _ask(socks[t], line)
                    times[t, name].append((time.perf_counter() - t0) * 1000)
        after = os.getloadavg()
        for i, sock in enumerate(socks):
            print(f"tree {a.trees[i]}: {ask(sock, 'stats', [])[2]}")
            procs[i].terminate()
            procs[i].wait(10)
    print(f"load {before[0]:.2f} -> {after[0]:.2f}; gap {a.gap} ms; {a.rounds} rounds")
    for name in calls:
        for t in range(2):
            s = sorted(times[t, name])
            p99 = s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]
            print(
                f"{name:12s} {a.trees[t]:14s} median {statistics.median(s):.3f} ms p99 {p99:.3f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
