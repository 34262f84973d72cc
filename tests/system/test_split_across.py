"""A stage split across a buffer's servers (issue 35), on the local DAC, whose servers share one
mount namespace: a buffer of two servers (placement across_servers) has its stage_in and
stage_out shared out between both dacds, each copying its share as the user; the trees come out
as one copier makes them; a share that fails fails the stage in one line naming its server; a
dacd killed mid-share and started again resumes its share from the record; one that stays
down has its share taken over by the primary."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from clitools import run, setup, slurm, wait_for
from stage_trees import MiB, buffer_for, fs_root, owned, seen, tree, write

from daccore.settings.config import load_config
from daccore.store import Store
from daccore.units import format_size
from dacd.staging import run as staging
from daclocal.procs import is_running


class Dacds:
    """The local DAC's dacds, stopped and started again by the test (its pids kept in the
    DAC's state, so `dacctl local down` stops them as its own)."""

    def __init__(self, workdir, env, rate=0):
        self.workdir, self.env, self.rate = workdir, env, rate
        self.procs: dict[str, subprocess.Popen] = {}

    def _state(self):
        return json.loads((self.workdir / "state.json").read_text())

    def pid(self, host):
        return next(d["pid"] for d in self._state()["dacd"] if d["host"] == host)

    def hosts(self):
        return [d["host"] for d in self._state()["dacd"]]

    def stop(self, host, sig=signal.SIGTERM):
        pid = self.pid(host)
        os.kill(pid, sig)
        wait_for(lambda: not is_running(pid), 30, f"dacd {host} to stop", every=0.05)

    def start(self, host):
        state = self._state()
        entry = next(d for d in state["dacd"] if d["host"] == host)
        log = open(self.workdir / "logs" / f"dacd-{host}-split.log", "ab")
        env = {k: v for k, v in os.environ.items() if k not in ("DAC_ETCD_ENDPOINTS",)}
        if self.rate:  # every copier of this dacd paced, so a share lasts long enough to cut
            env["DAC_BENCH_RATE"] = str(self.rate)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dacd.main",
                "--config",
                self.env["DAC_CONFIG"],
                "--host",
                host,
                "--metrics-address",
                entry["metrics"],
            ],
            stdout=log,
            stderr=log,
            env=env,
        )
        self.procs[host] = proc
        entry["pid"] = proc.pid
        (self.workdir / "state.json").write_text(json.dumps(state))
        return proc

    def log(self, host):
        return (self.workdir / "logs" / f"dacd-{host}-split.log").read_text(errors="replace")


@pytest.fixture
def split_dac(open_dir, request):
    """A local DAC of 2 servers x 2 bricks whose pool places a buffer across servers: a 1 GiB
    buffer is one brick on each. Its dacds are started again by the test, their copiers paced
    at the fixture's parameter in bytes a second (the bench's DAC_BENCH_RATE), if one."""
    workdir = open_dir / "dac"
    run(
        "dacctl",
        "local",
        "up",
        "--workdir",
        str(workdir),
        "--servers",
        "2",
        "--bricks-per-server",
        "2",
        "--brick-size",
        "512MiB",
        timeout=180,
    )
    env = {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
    store = Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
    dacds = Dacds(workdir, env, getattr(request, "param", 0))
    try:
        for host in dacds.hosts():
            dacds.stop(host)
        config = yaml.safe_load((workdir / "dac.yaml").read_text())
        config["pools"]["default"]["placement"] = "across_servers"
        (workdir / "dac.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        store.client.delete(store.keys.pool("default"))  # registered anew by the dacds
        for host in dacds.hosts():
            dacds.start(host)
        wait_for(lambda: store.alive() == set(dacds.hosts()), 60, "both dacds up")
        yield workdir, env, store, dacds
    finally:
        run("dacctl", "local", "down", "--workdir", str(workdir), check=False, timeout=180)
        for proc in dacds.procs.values():
            proc.wait(30)


def two_servers(store, job):
    alloc = store.buffer(str(job)).record.allocation
    assert len(alloc.hosts) == 2
    primary = alloc.primary_host
    (other,) = set(alloc.hosts) - {primary}
    return primary, other


def test_a_two_server_buffer_stages_in_and_out_split_across_both_dacds(
    split_dac, open_dir, tmp_path
):
    workdir, env, store, dacds = split_dac
    src = open_dir / "src"
    tree(src)
    one = fs_root(open_dir / "one")  # what a single copier makes of it
    staging.stage(buffer_for(src), "in", str(one), 2, lambda p: None)
    expected = seen(one / "striped" / "in")
    out = owned(open_dir / "results")
    script = setup(
        env,
        tmp_path,
        61,
        "1GiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
        f"#DW stage_out type=directory source=$DW_JOB_STRIPED/in destination={out}/run1",
    )
    primary, other = two_servers(store, 61)
    slurm(env, "data_in", 61, "--job", str(script))
    inside = workdir / "fs" / primary / "61" / "mnt" / "striped" / "in"
    got = seen(inside)
    assert got.keys() == expected.keys() and len(got) == 3 + 450 + 4
    for name in expected:
        assert got[name] == expected[name], name
    assert os.stat(inside / "sparse").st_blocks * 512 <= 8 * MiB  # holes stayed holes
    # each server copied its share, reported in its own status; the views sum them
    statuses = store.statuses("61")
    for host in (primary, other):
        report = statuses[host].share
        generation = store.buffer("61").record.generation
        assert (report.step, report.generation, report.failed) == ("stage_in", generation, "")
    assert statuses[primary].share.done == [0] and statuses[other].share.done == [1]
    total = sum(f * 13 for f in range(150)) * 3 + 5 * MiB + 777 + 64 * MiB
    # the stage's progress is the primary's: every share's, the other's from its report
    progress, part = statuses[primary].progress, statuses[other].share.parts
    assert statuses[other].progress is None and [p[0] for p in part] == [1] and part[0][1] > 0
    assert (progress.bytes_done, progress.bytes_total) == (total, total)
    assert (progress.files_done, progress.files_total) == (454, 454)
    line = run("dacctl", "status", "61", "--line", env=env).stdout
    assert line.startswith(
        f"buffer 61: staged_in, staged {format_size(total)}/{format_size(total)} 100% "
        "454/454 files at "
    ), line
    assert store.stage_plan("61", "stage_in") is None  # dropped once the stage is done
    assert "stage_in shares 1 on " + other in dacds.log(other)

    slurm(env, "data_out", 61, "--job", str(script))
    got = seen(out / "run1")
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name] == expected[name], name
    statuses = store.statuses("61")
    assert statuses[other].share.step == "stage_out" and statuses[other].share.done == [1]
    assert "stage_out shares 1 on " + other in dacds.log(other)
    slurm(env, "teardown", 61, "--job", str(script))
    wait_for(lambda: store.buffer("61") is None, 60, "the buffer reaped")
    assert store.stage_plan_buffers() == []


def test_a_share_that_fails_fails_the_stage_in_one_line_naming_its_server(
    split_dac, open_dir, tmp_path
):
    """The heavier file goes to share 0 (the primary's), the lighter one to share 1 (the
    other server's), which cannot read it."""
    _, env, store, dacds = split_dac
    src = owned(open_dir / "src")
    write(src / "a", os.urandom(8 * MiB))
    write(src / "b", os.urandom(MiB))
    os.chown(src / "b", 0, 0)
    os.chmod(src / "b", 0o600)
    script = setup(
        env,
        tmp_path,
        62,
        "1GiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
    )
    primary, other = two_servers(store, 62)
    r = slurm(env, "data_in", 62, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        f"buffer 62: stage_in failed on {other}: {src}/b: Permission denied\n",
    )
    statuses = store.statuses("62")
    assert statuses[primary].error.category.value == "user"
    assert statuses[other].error is None  # one line: the primary's
    assert statuses[other].share.failed == (
        f"stage_in failed on {other}: {src}/b: Permission denied"
    )
    assert store.stage_plan("62", "stage_in").failed  # every other share stops
    slurm(env, "teardown", 62, "--job", str(script), "--hurry")
    wait_for(lambda: store.buffer("62") is None, 60, "the buffer reaped")
    assert store.stage_plan_buffers() == []


def big_tree(src, files=12, size=8 * MiB):
    owned(src)
    block = os.urandom(size)
    for i in range(files):
        write(src / f"f{i:02}", i.to_bytes(4, "big") + block[4:])


def copying(store, job, host):
    """True once `host`'s share of the stage under way has begun and is not done."""
    s = store.statuses(str(job)).get(host)
    report = s.share if s else None
    return (
        report is not None
        and report.generation == store.buffer(str(job)).record.generation
        and s.step == "stage_in"
        and not report.done
    )


def data_in_in_background(env, job, script):
    return subprocess.Popen(
        [
            str(os.path.join(os.path.dirname(sys.executable), "dacctl")),
            "--function",
            "data_in",
            "--token",
            str(job),
            "--job",
            str(script),
        ],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("split_dac", [24 * MiB], indirect=True)
def test_a_dacd_killed_mid_share_and_started_again_resumes_its_share(split_dac, open_dir, tmp_path):
    workdir, env, store, dacds = split_dac
    src = open_dir / "src"
    big_tree(src)
    script = setup(
        env,
        tmp_path,
        63,
        "1GiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
    )
    primary, other = two_servers(store, 63)
    call = data_in_in_background(env, 63, script)
    wait_for(lambda: copying(store, 63, other), 60, "the other server's share", every=0.05)
    dacds.stop(other, signal.SIGKILL)
    dacds.start(other)  # at once: its lease never lapses, so its share is not taken over
    out, err = call.communicate(timeout=180)
    assert (call.returncode, out) == (0, ""), err
    inside = workdir / "fs" / primary / "63" / "mnt" / "striped" / "in"
    assert {p.name: p.read_bytes() for p in inside.iterdir()} == {
        p.name: p.read_bytes() for p in src.iterdir()
    }
    assert "stage_in shares 1 on " + other in dacds.log(other).split("registered")[-1]
    assert "taken over" not in dacds.log(primary)
    assert store.statuses("63")[other].share.done == [1]
    slurm(env, "teardown", 63, "--job", str(script))


@pytest.mark.parametrize("split_dac", [24 * MiB], indirect=True)
def test_a_server_lost_mid_share_has_its_share_taken_over(split_dac, open_dir, tmp_path):
    workdir, env, store, dacds = split_dac
    src = open_dir / "src"
    big_tree(src)
    script = setup(
        env,
        tmp_path,
        64,
        "1GiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
    )
    primary, other = two_servers(store, 64)
    call = data_in_in_background(env, 64, script)
    wait_for(lambda: copying(store, 64, other), 60, "the other server's share", every=0.05)
    dacds.stop(other, signal.SIGKILL)
    started = time.monotonic()
    wait_for(lambda: other not in store.alive(), 30, "its lease to lapse", every=0.1)
    wait_for(
        lambda: store.stage_plan("64", "stage_in").owners == [primary, primary],
        30,
        "the share taken over",
        every=0.1,
    )
    assert time.monotonic() - started < 5 + 3  # the lease's TTL, and a look a second
    # the waiting call rides the lost server out (restart_grace); it comes back for the rest
    dacds.start(other)
    out, err = call.communicate(timeout=180)
    assert (call.returncode, out) == (0, ""), err
    inside = workdir / "fs" / primary / "64" / "mnt" / "striped" / "in"
    assert {p.name: p.read_bytes() for p in inside.iterdir()} == {
        p.name: p.read_bytes() for p in src.iterdir()
    }
    assert f"share 1 of lost server {other} taken over by {primary}" in dacds.log(primary)
    statuses = store.statuses("64")
    assert statuses[primary].share.done == [0, 1]
    # the lost server's last figures for share 1 are not counted with the primary's
    assert statuses[other].share.parts and statuses[other].share.parts[0][0] == 1
    progress = statuses[primary].progress
    assert progress.bytes_done == progress.bytes_total == 12 * 8 * MiB
    line = run("dacctl", "status", "64", "--line", env=env).stdout
    assert " 100% 12/12 files" in line, line
    slurm(env, "teardown", 64, "--job", str(script))


@pytest.mark.parametrize("split_dac", [24 * MiB], indirect=True)
def test_a_primary_killed_mid_stage_and_started_again_resumes_the_plan(
    split_dac, open_dir, tmp_path
):
    """No new prepare: the recorded plan of this generation is taken up again, the primary's
    own share copied again, the other server's report read as it stands."""
    workdir, env, store, dacds = split_dac
    src = open_dir / "src"
    big_tree(src)
    script = setup(
        env,
        tmp_path,
        65,
        "1GiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
    )
    primary, other = two_servers(store, 65)
    call = data_in_in_background(env, 65, script)
    wait_for(lambda: copying(store, 65, other), 60, "the other server's share", every=0.05)
    planned = store.stage_plan("65", "stage_in")
    dacds.stop(primary, signal.SIGKILL)
    dacds.start(primary)
    out, err = call.communicate(timeout=180)
    assert (call.returncode, out) == (0, ""), err
    inside = workdir / "fs" / primary / "65" / "mnt" / "striped" / "in"
    assert {p.name: p.read_bytes() for p in inside.iterdir()} == {
        p.name: p.read_bytes() for p in src.iterdir()
    }
    after = dacds.log(primary).split("registered")[-1]
    assert "stage_in resumes its split across" in after
    statuses = store.statuses("65")
    assert statuses[primary].share.attempt == planned.attempt == statuses[other].share.attempt
    assert statuses[primary].share.done == [0] and statuses[other].share.done == [1]
    slurm(env, "teardown", 65, "--job", str(script))
