"""Faults met by real parts (issue 19, docs/reliability.md): a dacd killed (-9) in the middle of
each step and started again only after its lease lapsed, as systemd's Restart= would; the Slurm
call waiting on it rides it out within `restart_grace`, and past it fails with one line whose
every remedy is then done here and works."""

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clitools import pools, revision, run, setup, slurm, step_started, wait_for
from mounts import mounts

from daccore.errors import StoreUnavailable
from daclocal.procs import is_running

UID, GID = 1234, 4321
MiB = 1 << 20


def poll(check, timeout=120.0, what="condition", every=0.02):
    """wait_for, looking often: a step or a lease may come and go within 0.2 s."""
    return wait_for(check, timeout, what, every)


def finished(call: subprocess.Popen, timeout: float) -> tuple[int, str]:
    """A background call's exit status and stdout; its stderr, which says why it failed, is
    the assertion's message when it did."""
    out, err = call.communicate(timeout=timeout)
    assert call.returncode == 0, f"rc {call.returncode}: {out}{err}"
    return call.returncode, out


def call_in_background(env, function, job, *args):
    """A Slurm call that waits for dacd, as slurmscriptd runs it."""
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "dacctl"),
            "--function",
            function,
            "--token",
            str(job),
            *args,
        ],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def dacd_pid(workdir, host):
    state = json.loads((workdir / "state.json").read_text())
    return next(d["pid"] for d in state["dacd"] if d["host"] == host)


def start_dacd(workdir, env, host):
    """dacd for `host` again, as systemd would start it; its log says what it did."""
    log = open(workdir / "logs" / f"dacd-{host}-restarted.log", "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "dacd.main", "--config", env["DAC_CONFIG"], "--host", host],
        stdout=log,
        stderr=log,
        env={
            k: v
            for k, v in os.environ.items()
            if k not in ("DAC_ETCD_ENDPOINTS", "ETCDCTL_ENDPOINTS")
        },
    )


def stop(proc):
    proc.terminate()
    proc.wait(30)


def processes():
    """pid -> (parent pid, uid) of every process."""
    out = {}
    for d in Path("/proc").iterdir():
        try:
            fields = dict(line.split(":", 1) for line in (d / "status").read_text().splitlines())
            out[int(d.name)] = (int(fields["PPid"]), int(fields["Uid"].split()[0]))
        except (ValueError, OSError, KeyError):
            continue
    return out


def copiers(pid):
    """The job user's processes below `pid` (a stage's copier and its workers)."""
    procs, parents = processes(), {pid}
    found: set[int] = set()
    while True:
        more = {p for p, (ppid, uid) in procs.items() if ppid in parents and uid == UID} - found
        if not more:
            return found
        found |= more
        parents = more


def kill_until_lapsed(workdir, store, name, step, since, call):
    """SIGKILL the dacd of buffer `name`'s host once it runs `step` (a stage: once its copier
    runs), and wait until its lease has lapsed (the host is down); returns the host, how long
    that took, and the killed dacd's copier processes still alive then."""
    host = store.buffer(name).record.allocation.primary_host
    step_started(store, name, host, step, since, call)
    pid = dacd_pid(workdir, host)
    stage = poll(lambda: copiers(pid), 30, "the copier") if step.startswith("stage") else set()
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    poll(lambda: host not in store.alive(), 30, "the lease to lapse", every=0.1)
    return host, time.monotonic() - killed, stage & set(processes())


def make_source(directory, files=48, size=8 * MiB):
    """`files` files of `size` bytes (distinct contents), readable by the job's user."""
    directory.mkdir(mode=0o755)
    block = os.urandom(size)
    for i in range(files):
        path = directory / f"f{i:03}"
        path.write_bytes(i.to_bytes(4, "big") + block[4:])
        os.chown(path, UID, GID)
    os.chown(directory, UID, GID)
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def digests(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def ran_again(workdir, host, name, step):
    log = (workdir / "logs" / f"dacd-{host}-restarted.log").read_text(errors="replace")
    return f"buffer {name} (job {name}): {step} on {host}" in log


@pytest.mark.parametrize(
    "function,step",
    [
        ("data_in", "stage_in"),
        ("pre_run", "mount"),
        ("post_run", "unmount"),
        ("data_out", "stage_out"),
        ("teardown", "delete"),
    ],
)
def test_a_dacd_restarted_after_its_lease_lapsed_costs_the_job_nothing(
    dac, open_dir, tmp_path, function, step
):
    """kill -9 mid-step, the host down (lease lapsed), dacd back within restart_grace: the
    waiting call succeeds with nothing on stdout, the step done by the restarted dacd."""
    workdir, env, store = dac
    job = 40
    src, out = open_dir / "src", open_dir / "results"
    lines = []
    if function == "data_in":
        expected = make_source(src)
        lines.append(f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in")
    if function == "data_out":
        out.mkdir(mode=0o755)
        os.chown(out, UID, GID)
        lines.append(
            f"#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination={out}/run"
        )
    script = setup(env, tmp_path, job, "1GiB", *lines)
    nodes = tmp_path / "nodes"
    nodes.write_text("node1\nnode2\n")
    host = store.buffer(str(job)).record.allocation.primary_host
    before = {
        "data_in": [],
        "pre_run": [],
        "post_run": ["pre_run"],
        "data_out": ["pre_run", "post_run"],
        "teardown": ["pre_run"],
    }[function]
    for f in before:
        slurm(env, f, job, "--job", str(script), "--nodehostnamefile", str(nodes))
        if f == "pre_run" and function == "data_out":  # the job writes its results
            made = workdir / "fs" / host / str(job) / "mnt" / "striped" / "out"
            expected = make_source(made)
    args = ["--job", str(script)]
    if function in ("pre_run", "post_run", "teardown"):
        args += ["--nodehostnamefile", str(nodes)]
    since = revision(store)
    call = call_in_background(env, function, job, *args)
    host, lapse, orphans = kill_until_lapsed(workdir, store, str(job), step, since, call)
    assert call.poll() is None, call.stdout.read()  # waiting for the host, not failing at once
    # the killed dacd's copier ends at its next progress line (a broken pipe) and kills its
    # workers, before the host is even down: no two copiers ever write the same buffer
    assert orphans == set()
    proc = start_dacd(workdir, env, host)
    try:
        assert finished(call, 180) == (0, "")
        assert ran_again(workdir, host, job, step)  # cut short, then done by the new dacd
        if function == "data_in":
            assert digests(workdir / "fs" / host / str(job) / "mnt" / "striped" / "in") == expected
        if function == "data_out":
            assert digests(out / "run") == expected
        binds = [m for m in mounts() if m.startswith(f"{workdir}/nodes/")]
        assert len(binds) == (4 if function == "pre_run" else 0)
        if function == "teardown":
            assert store.buffer(str(job)) is None and store.claims() == {}
            assert pools(env)["default"]["free_bricks"] == 4
        else:
            slurm(
                env,
                "teardown",
                job,
                "--job",
                str(script),
                "--nodehostnamefile",
                str(nodes),
                "--hurry",
            )
            assert store.buffer(str(job)) is None and store.claims() == {}
    finally:
        stop(proc)
    print(f"\n{function}: lease lapsed {lapse:.1f}s after the kill; the call succeeded")


def shorten_grace(workdir, seconds):
    """restart_grace in the local DAC's config (read by every Slurm call; dacd never reads it)."""
    path = workdir / "dac.yaml"
    path.write_text(path.read_text() + f"restart_grace: {seconds}\n")


def test_past_the_grace_the_call_fails_in_one_line_and_its_remedies_work(dac, tmp_path):
    """data_in past restart_grace: one line naming the host and the remedies; doing them (start
    dacd, cancel the job: Slurm's teardown) completes the teardown and frees every brick."""
    workdir, env, store = dac
    shorten_grace(workdir, 3)
    script = setup(
        env,
        tmp_path,
        8,
        "512MiB",
        "#DW stage_in type=file source=/etc/hostname destination=$DW_JOB_STRIPED/hostname",
    )
    host = store.buffer("8").record.allocation.primary_host
    os.kill(dacd_pid(workdir, host), signal.SIGKILL)
    poll(lambda: host not in store.alive(), 30, "the lease to lapse", every=0.1)
    start = time.monotonic()
    r = run(
        "dacctl",
        "--function",
        "data_in",
        "--token",
        "8",
        "--job",
        str(script),
        env=env,
        check=False,
    )
    took = time.monotonic() - start
    assert 3 <= took < 10, took  # the grace, then at once
    assert (r.returncode, r.stdout) == (
        1,
        f"buffer 8: storage host {host} is down (its dacd's lease lapsed and it did not come "
        "back within restart_grace, 3s); restart dacd there (systemctl restart dacd), then "
        "cancel job 8 (scancel 8): its teardown frees the buffer once dacd is back; if the "
        "host is gone for good: dacctl forget 8\n",
    )
    # remedy 1: (re)start dacd there, then cancel the job (Slurm runs teardown)
    proc = start_dacd(workdir, env, host)
    try:
        slurm(env, "teardown", 8, "--job", str(script))
        assert store.buffer("8") is None and store.claims() == {}
        assert pools(env)["default"]["free_bricks"] == 4
        assert not [m for m in mounts() if m.startswith(f"{workdir}/fs/")]
    finally:
        stop(proc)
    print(f"\npast the grace: failed after {took:.1f}s")


def test_a_host_gone_for_good_is_forgotten_and_the_jobs_teardown_succeeds(dac, tmp_path):
    """The other remedy: the host never comes back; `dacctl forget` as the line says, then
    Slurm's teardown of the cancelled job succeeds at once; a teardown that came first fails past
    the grace naming both remedies."""
    workdir, env, store = dac
    shorten_grace(workdir, 2)
    script = setup(env, tmp_path, 9, "512MiB")
    host = store.buffer("9").record.allocation.primary_host
    os.kill(dacd_pid(workdir, host), signal.SIGKILL)
    poll(lambda: host not in store.alive(), 30, "the lease to lapse", every=0.1)
    r = slurm(env, "teardown", 9, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        f"buffer 9: storage host {host} is down (its dacd's lease lapsed and it did not come "
        "back within restart_grace, 2s); restart dacd there (systemctl restart dacd): it "
        "finishes this teardown by itself; if the host is gone for good: dacctl forget 9\n",
    )
    out = run("dacctl", "forget", "9", env=env).stdout
    assert out.startswith("buffer 9 forgotten")
    slurm(env, "teardown", 9, "--job", str(script))  # Slurm retries: nothing left to do
    assert store.buffer("9") is None and store.claims() == {}


def test_a_dacd_back_after_a_failed_teardown_finishes_it_by_itself(dac, tmp_path):
    """The teardown line's first remedy: dacd started again tears the buffer down with no call
    from Slurm."""
    workdir, env, store = dac
    shorten_grace(workdir, 2)
    script = setup(env, tmp_path, 7, "512MiB")
    host = store.buffer("7").record.allocation.primary_host
    os.kill(dacd_pid(workdir, host), signal.SIGKILL)
    poll(lambda: host not in store.alive(), 30, "the lease to lapse", every=0.1)
    r = slurm(env, "teardown", 7, "--job", str(script), check=False)
    assert r.returncode == 1 and "it finishes this teardown by itself" in r.stdout
    proc = start_dacd(workdir, env, host)
    try:
        poll(lambda: store.buffer("7") is None, 120, "the restarted dacd's teardown", every=0.2)
        assert store.claims() == {} and pools(env)["default"]["free_bricks"] == 4
    finally:
        stop(proc)


def restart_etcd(workdir, store):
    """kill -9 the local DAC's etcd and start it again on its data, as systemd would: again
    when it exits at once (Restart=on-failure), as when a connection made while it was down
    took its port as its own source port; returns once it answers `store`."""
    from daclocal.cluster import LocalState
    from daclocal.procs import spawn

    state = LocalState.load(workdir)
    assert state is not None, workdir
    pid = state.etcd["pid"]
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
    os.kill(pid, signal.SIGKILL)
    while is_running(pid):
        time.sleep(0.02)
    log = workdir / "etcd" / "etcd.log"
    for _ in range(5):
        proc = spawn(argv, log)
        state.etcd["pid"] = proc.pid
        for m in state.etcd.get("members", []):
            m["pid"] = proc.pid
        state.save()
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(StoreUnavailable):
                store.pools()
                return
        time.sleep(0.5)  # systemd's RestartSec, shortened
    tail = log.read_text(errors="replace").splitlines()[-3:]
    raise AssertionError(f"etcd did not come back: {tail}")


def test_a_dacd_whose_watch_fell_behind_a_compaction_lists_again_and_misses_nothing(dac, tmp_path):
    """Both dacds frozen (SIGSTOP) while a buffer is set up, etcd compacted past the revision
    their watches resume from and restarted (their streams break): resumed, they get
    "compacted", list their buffers again, and the buffer is built: the setup call succeeds."""
    workdir, env, store = dac
    pids = [d["pid"] for d in json.loads((workdir / "state.json").read_text())["dacd"]]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        script = tmp_path / "job12.sh"
        script.write_text("#!/bin/sh\n#DW jobdw capacity=512MiB pool=default\n")
        call = call_in_background(
            env,
            "setup",
            12,
            "--caller",
            "SLURM",
            "--user",
            str(UID),
            "--groupid",
            str(GID),
            "--job",
            str(script),
        )
        poll(lambda: store.buffer("12"), 30, "the buffer's spec")
        for i in range(5):  # revisions past the spec's, all compacted away
            store.client.put(f"/dac/v1/test/compact/{i}", "x")
        revision = store.client.range("/dac/v1/test/compact/0")[1]
        pki, creds = workdir / "etcd" / "pki", workdir / "etcd" / "credentials"
        r = subprocess.run(
            [
                "etcdctl",
                "--endpoints",
                store.client.endpoints[0],
                "--cacert",
                str(pki / "ca.pem"),
                "--cert",
                str(pki / "client.pem"),
                "--key",
                str(pki / "client.key"),
                "--user",
                (creds / "root").read_text().strip(),
                "compaction",
                str(revision),
            ],
            capture_output=True,
            text=True,
            env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"},
        )
        assert r.returncode == 0, r.stderr
        restart_etcd(workdir, store)  # the frozen watches' streams break: they resume, compacted
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert finished(call, 120) == (0, "")
    host = store.buffer("12").record.allocation.primary_host
    log = (workdir / "logs" / f"dacd-{host}.log").read_text(errors="replace")
    assert "watch compacted; listing this host's buffers again" in log
    slurm(env, "teardown", 12, "--job", str(script))
    assert store.buffer("12") is None and store.claims() == {}


def test_a_dacd_frozen_past_its_lease_acts_on_nothing_until_it_has_registered_again(dac, tmp_path):
    """dacd frozen (SIGSTOP) until its lease lapsed while Slurm asks for a teardown, then
    resumed: every status it writes for the buffer (the teardown's) comes after its new alive
    key, i.e. after it registered again (the fence: each write compares that key); the teardown
    call, waiting within restart_grace, succeeds."""
    import threading

    workdir, env, store = dac
    script = setup(env, tmp_path, 13, "512MiB")
    host = store.buffer("13").record.allocation.primary_host
    pid = dacd_pid(workdir, host)
    key = store.keys.status("13", host)
    os.kill(pid, signal.SIGSTOP)
    try:
        poll(lambda: host not in store.alive(), 30, "the lease to lapse", every=0.1)
        revision = store.client.range(key)[1]
        watch = store.client.watch(key, key + "\0", start_revision=revision + 1)
        writes = []

        def read() -> None:
            for e in watch:
                if e.kv.value:
                    writes.append(e.kv.mod_revision)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        call = call_in_background(env, "teardown", 13, "--job", str(script))
        poll(
            lambda: store.buffer("13").record.desired_state.value == "deleted",
            30,
            "the teardown's spec",
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        assert finished(call, 120) == (0, "")
        assert store.buffer("13") is None and store.claims() == {}
        registered = store.client.get(store.keys.alive_key(host)).create_revision
        assert writes and min(writes) > registered, (writes, registered)
    finally:
        watch.close()
    log = (workdir / "logs" / f"dacd-{host}.log").read_text(errors="replace")
    fenced = "this dacd's lease lapsed; it acts on no buffer" in log
    assert "registered again with a new lease" in log
    print(
        f"\nfrozen dacd: {len(writes)} status writes, all after its new lease "
        f"(a pass fenced meanwhile: {fenced})"
    )


@pytest.mark.parametrize("remedy", ["resumed", "restarted"])
def test_a_dacd_frozen_past_the_grace_fails_its_jobs_in_one_line_and_rejoins(dac, tmp_path, remedy):
    """dacd frozen (SIGSTOP) past its lease and past restart_grace: the waiting data_in fails
    with the one line naming the host, as for a dead dacd. Its remedy, `systemctl restart
    dacd` (systemd sends SIGTERM, then SIGCONT, and starts it again; the pending SIGTERM goes
    to whichever thread resumes first), or the freeze ending by itself: the host rejoins, the
    job's teardown (scancel) frees every brick, none claimed twice."""
    workdir, env, store = dac
    shorten_grace(workdir, 3)
    script = setup(
        env,
        tmp_path,
        14,
        "512MiB",
        "#DW stage_in type=file source=/etc/hostname destination=$DW_JOB_STRIPED/hostname",
    )
    host = store.buffer("14").record.allocation.primary_host
    claimed = store.claims()
    pid = dacd_pid(workdir, host)
    os.kill(pid, signal.SIGSTOP)
    proc = None
    try:
        poll(lambda: host not in store.alive(), 30, "the lease to lapse", every=0.1)
        start = time.monotonic()
        r = slurm(env, "data_in", 14, "--job", str(script), check=False)
        took = time.monotonic() - start
        assert (r.returncode, r.stdout.count("\n")) == (1, 1), r.stdout
        assert r.stdout.startswith(
            f"buffer 14: storage host {host} is down (its dacd's lease "
            "lapsed and it did not come back within restart_grace, 3s); "
            "restart dacd there (systemctl restart dacd)"
        ), r.stdout
        assert store.claims() == claimed  # nothing taken from it, nothing given to another
        if remedy == "restarted":  # what systemctl restart does to a stopped process
            os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGCONT)
        if remedy == "restarted":
            poll(lambda: not is_running(pid), 30, "dacd to stop")
            proc = start_dacd(workdir, env, host)
        poll(lambda: host in store.alive(), 60, "the host to register again", every=0.1)
        slurm(env, "teardown", 14, "--job", str(script))  # scancel
        assert store.buffer("14") is None and store.claims() == {}
        assert pools(env)["default"]["free_bricks"] == 4
        assert not [m for m in mounts() if m.startswith(f"{workdir}/fs/")]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        if proc is not None:
            stop(proc)
    print(f"\nfrozen past the grace ({remedy}): data_in failed after {took:.1f}s")


def test_a_sigterm_taken_by_any_thread_stops_dacd_at_once(dac):
    """SIGTERM sent to a thread of dacd other than its main one (as after SIGSTOP, when
    whichever thread resumes first takes the pending signal): dacd stops within seconds and its
    host leaves the pools at once (lease revoked), as for a SIGTERM the main thread takes."""
    import ctypes

    workdir, env, store = dac
    host = sorted(store.hosts())[0]
    pid = dacd_pid(workdir, host)
    others = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir() if int(t.name) != pid]
    assert others, "dacd runs threads besides its main one"
    start = time.monotonic()
    assert ctypes.CDLL(None, use_errno=True).tgkill(pid, others[-1], signal.SIGTERM) == 0
    poll(lambda: not is_running(pid), 10, "dacd to stop")
    took = time.monotonic() - start
    assert host not in store.alive()
    log = (workdir / "logs" / f"dacd-{host}.log").read_text(errors="replace")
    assert f"host {host} stopped" in log
    print(f"\nSIGTERM to thread {others[-1]} of dacd: stopped after {took:.1f}s")


def test_a_stage_in_larger_than_the_buffer_fails_in_one_line_naming_the_file(
    dac, open_dir, tmp_path
):
    workdir, env, store = dac
    src = open_dir / "big"
    make_source(src, files=3, size=200 * MiB)  # 600 MiB into 512 MiB
    script = setup(
        env,
        tmp_path,
        81,
        "512MiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
    )
    host = store.buffer("81").record.allocation.primary_host
    r = slurm(env, "data_in", 81, "--job", str(script), check=False)
    # the copier counts first: nothing is copied into a buffer it cannot fill
    assert r.returncode == 1 and r.stdout.count("\n") == 1, r.stdout
    assert r.stdout.startswith(
        f"buffer 81: stage_in failed: {workdir}/fs/{host}/81/mnt/striped: "
        "not enough space for the data to stage ("
    ), r.stdout
    assert r.stdout.endswith(" free)\n"), r.stdout
    slurm(env, "teardown", 81, "--job", str(script))  # Slurm tears a failed stage-in down
    assert store.buffer("81") is None and pools(env)["default"]["free_bricks"] == 4


@contextlib.contextmanager
def job_staging_out_to_tmpfs(dac, open_dir, tmp_path, job, options, files, size):
    """A job whose stage-out goes to a tmpfs mounted with `options`, run to the end of its
    post_run, having written `files` files of `size` bytes: yields (the tmpfs, the job script,
    their digests)."""
    workdir, env, store = dac
    small = open_dir / "small"
    small.mkdir(mode=0o755)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"{options},mode=0755", "tmpfs", str(small)], check=True
    )
    try:
        os.chown(small, UID, GID)
        script = setup(
            env,
            tmp_path,
            job,
            "512MiB",
            f"#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination={small}/run",
        )
        nodes = tmp_path / "nodes"
        nodes.write_text("node1\n")
        host = store.buffer(str(job)).record.allocation.primary_host
        slurm(env, "pre_run", job, "--job", str(script), "--nodehostnamefile", str(nodes))
        expected = make_source(
            workdir / "fs" / host / str(job) / "mnt" / "striped" / "out", files=files, size=size
        )
        slurm(env, "post_run", job, "--job", str(script), "--nodehostnamefile", str(nodes))
        yield small, script, expected
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_a_stage_out_into_a_full_filesystem_keeps_the_buffer_until_retried(dac, open_dir, tmp_path):
    """data_out into a full filesystem: one line naming the file; the buffer is kept (and
    teardown, which stages out first, fails the same way: Slurm's TeardownFailure); once the
    admin made room, data_out (or Slurm's next teardown) runs the stage again and it succeeds;
    `teardown --hurry` (scancel --hurry) would instead release it without the data."""
    _, env, store = dac
    with job_staging_out_to_tmpfs(
        dac, open_dir, tmp_path, 82, "size=8m", files=4, size=4 * MiB
    ) as (small, script, expected):  # 16 MiB into 8
        for function in ("data_out", "teardown"):
            r = slurm(env, function, 82, "--job", str(script), check=False)
            assert r.returncode == 1 and r.stdout.count("\n") == 1, r.stdout
            assert r.stdout == (
                f"buffer 82: stage_out failed: {small}: not enough space for "
                "the data to stage (8.0 MiB free)\n"
            ), r.stdout
            assert store.buffer("82") is not None  # kept: the data can still be saved
        subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True)
        slurm(env, "data_out", 82, "--job", str(script))  # the retry
        assert digests(small / "run") == expected
        slurm(env, "teardown", 82, "--job", str(script))
        assert store.buffer("82") is None and pools(env)["default"]["free_bricks"] == 4


def as_user(*argv):
    """`argv` as the job's user, with nothing of root's: what a job's own process can do."""
    return subprocess.run(
        ["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups", "--", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_brick_filling_while_the_job_writes_costs_the_job_only_its_own_write(
    dac, open_dir, tmp_path
):
    """The job fills its buffer: its own write fails with the kernel's ENOSPC naming its file;
    dac goes on: post_run, the stage-out of what the job wrote before, and the teardown all
    succeed, every brick back."""
    workdir, env, store = dac
    results = open_dir / "results"
    results.mkdir(mode=0o755)
    os.chown(results, UID, GID)
    script = setup(
        env,
        tmp_path,
        84,
        "512MiB",
        f"#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination={results}/run",
    )
    nodes = tmp_path / "nodes"
    nodes.write_text("node1\n")
    host = store.buffer("84").record.allocation.primary_host
    slurm(env, "pre_run", 84, "--job", str(script), "--nodehostnamefile", str(nodes))
    striped = workdir / "fs" / host / "84" / "mnt" / "striped"
    expected = make_source(striped / "out", files=4, size=MiB)
    fill = as_user("dd", "if=/dev/zero", f"of={striped}/fill", "bs=4M", "status=none")
    assert fill.returncode == 1, fill.stderr
    assert fill.stderr.strip() == f"dd: error writing '{striped}/fill': No space left on device"
    for f in ("post_run", "data_out"):
        slurm(env, f, 84, "--job", str(script), "--nodehostnamefile", str(nodes))
    assert digests(results / "run") == expected
    assert store.statuses("84")[host].error is None
    slurm(env, "teardown", 84, "--job", str(script), "--nodehostnamefile", str(nodes))
    assert store.buffer("84") is None and pools(env)["default"]["free_bricks"] == 4


def test_a_destination_filling_during_the_stage_out_fails_it_naming_the_file(
    dac, open_dir, tmp_path
):
    """The room counted before the copy is not the room there is once it runs (here: a
    filesystem with bytes to spare but too few inodes): the stage-out fails with one line naming
    the file it could not write, and the buffer is kept, as for a full filesystem."""
    _, env, store = dac
    with job_staging_out_to_tmpfs(
        dac, open_dir, tmp_path, 85, "size=64m,nr_inodes=6", files=10, size=MiB
    ) as (small, script, _):
        r = slurm(env, "data_out", 85, "--job", str(script), check=False)
        assert r.returncode == 1 and r.stdout.count("\n") == 1, r.stdout
        assert r.stdout.startswith(f"buffer 85: stage_out failed: {small}/run/f"), r.stdout
        assert r.stdout.endswith(": No space left on device\n"), r.stdout
        assert store.buffer("85") is not None  # kept: the data can still be saved
        slurm(env, "teardown", 85, "--job", str(script), "--hurry")
        assert store.buffer("85") is None and pools(env)["default"]["free_bricks"] == 4
