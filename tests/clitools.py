"""Running dac's installed commands the way a user or Slurm would."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def run(tool, *args, env=None, check=True, timeout=60):
    """Run an installed entry point (dacctl, dacd); raise with its stderr when check fails."""
    full_env = {**os.environ, **(env or {})}
    r = subprocess.run(
        [str(BIN / tool), *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"{tool} {' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}"
        )
    return r


def pools(env):
    """`dacctl pools --json`, by pool name."""
    out = run("dacctl", "pools", "--json", env=env).stdout
    return {p["name"]: p for p in json.loads(out)["pools"]}


def setup(env, tmp_path, job, capacity, *lines, uid=1234, gid=4321):
    """Slurm's setup call for a job asking for a striped,private buffer (plus `lines`)."""
    script = tmp_path / f"job{job}.sh"
    script.write_text(
        f"#!/bin/sh\n#DW jobdw capacity={capacity} access_mode=striped,private "
        "pool=default\n" + "".join(line + "\n" for line in lines)
    )
    run(
        "dacctl",
        "--function",
        "setup",
        "--token",
        str(job),
        "--caller",
        "SLURM",
        "--user",
        str(uid),
        "--groupid",
        str(gid),
        "--job",
        str(script),
        env=env,
    )
    return script


def slurm(env, function, token, *args, check=True):
    """A Slurm function call as burst_buffer/datawarp makes it."""
    return run("dacctl", "--function", function, "--token", str(token), *args, env=env, check=check)


def wait_for(check, timeout=120, what="condition", every=0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def revision(store) -> int:
    """etcd's revision now: `step_started` from it sees every status written after it."""
    return store.client.range(store.keys.statuses)[1]


def step_started(store, name, host, step, since, call=None, timeout=120):
    """Return the host once `host` (None: any host) has started `step` of buffer `name`, seen
    by watching every status written since revision `since`: a step shorter than any poll, or
    a poll delayed by a loaded machine, cannot hide it. Fails at once if `call` (a Popen)
    ended meanwhile."""
    watch, changes = store.watch_statuses(since)
    seen, started, where = [], threading.Event(), []

    def follow():
        for change in changes:
            r = change.record
            if r and r.buffer == name and host in (None, r.host):
                seen.append(r.step)
                if r.step.startswith(step):
                    where.append(r.host)
                    started.set()
                    return

    threading.Thread(target=follow, daemon=True).start()
    try:
        deadline = time.monotonic() + timeout
        while not started.wait(0.1):
            assert call is None or call.poll() is None, (
                f"the call ended before {step} started: {call.stdout.read()}"
            )
            assert time.monotonic() < deadline, f"{step} never started; steps seen: {seen}"
    finally:
        watch.close()
    return where[0]


def reached(store, name, state):
    def check():
        statuses = store.statuses(name)
        for s in statuses.values():
            assert s.error is None, s.error
        return statuses and all(s.state is state for s in statuses.values()) and statuses

    return check
