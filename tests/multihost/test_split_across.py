"""A stage of a Lustre buffer split across its servers' dacds (issue 35) on the multi-host site,
whose Lustre stand-in's client mount is one real directory every server sees: each server's
dacd, in its own namespaces, copies its share as the job's user into (stage_in) or out of
(stage_out) the primary's client mount; the tree comes out as one copier makes it; a share that
fails fails the stage in one line naming its server."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from clitools import pools, run, slurm, wait_for
from stage_trees import MiB, Owner, seen

from dacd.staging import run as staging

#: the job's user on the multi-host site's hosts
USER = Owner(1001, 1001)
owned, write = USER.owned, USER.write


def tree(src: Path) -> None:
    """Directories, small and big files, a sparse one, an empty one, a link, times set."""
    USER.tree(src, dirs=2, files=60, step=131, big=3 * MiB + 777, sparse=(1, 20, 32))


def single_copy(src: Path, root: Path) -> dict:
    """What one copier makes of `src` (as the job's user, as a stage does)."""
    fs = USER.fs_root(root)
    staging.stage(USER.buffer_for(src), "in", str(fs), 2, lambda p: None)
    return seen(fs / "striped" / "in")


def paced_source(site, token: int) -> Path:
    """12 files of 8 MiB, each its own first bytes: long enough to cut a paced share."""
    src = owned(owned(site.root / f"split{token}") / "src")
    block = os.urandom(8 * MiB)
    for i in range(12):
        write(src / f"f{i:02}", i.to_bytes(4, "big") + block[4:])
    return src


def data_in_in_background(env, token: int, script: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "dacctl"),
            *("--function", "data_in", "--token", str(token), "--job", str(script)),
        ],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def job_script(site, token: int, *lines: str) -> Path:
    script = site.root / f"job{token}.sh"
    script.write_text(
        "#!/bin/sh\n#DW jobdw capacity=200GiB access_mode=striped pool=p\n"
        + "".join(line + "\n" for line in lines)
    )
    return script


def set_up(env, token: int, script: Path) -> None:
    slurm(env, "job_process", token, "--job", str(script))
    slurm(
        env,
        "setup",
        token,
        "--caller",
        "SLURM",
        "--user",
        str(USER.uid),
        "--groupid",
        str(USER.gid),
        "--job",
        str(script),
    )


def two_servers(store, token: int) -> tuple[str, str]:
    alloc = store.buffer(str(token)).record.allocation
    assert sorted(alloc.hosts) == ["srv1", "srv2"]
    (other,) = set(alloc.hosts) - {alloc.primary_host}
    return alloc.primary_host, other


def dacd_log(site, host: str) -> str:
    return (site.root / f"dacd-{host}.log").read_text(errors="replace")


def test_mh_a_lustre_buffer_stages_in_and_out_split_across_both_servers(mh):
    site, env, store = mh
    work = owned(site.root / "split121")
    src = work / "src"
    tree(src)
    expected = single_copy(src, work / "one")
    out = owned(work / "results")
    script = job_script(
        site,
        121,
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
        f"#DW stage_out type=directory source=$DW_JOB_STRIPED/in destination={out}/run1",
    )
    set_up(env, 121, script)
    primary, other = two_servers(store, 121)
    before = {h: len(dacd_log(site, h)) for h in (primary, other)}
    slurm(env, "data_in", 121, "--job", str(script))

    # the primary's client mount, as the primary's dacd stages into it
    fs_path = Path(site.recorded.root) / primary / "fs" / "121" / "mnt"
    got = seen(fs_path / "striped" / "in")
    assert got.keys() == expected.keys() and len(got) == 2 + 120 + 4
    for name in expected:
        assert got[name] == expected[name], name
    assert os.stat(fs_path / "striped" / "in" / "sparse").st_blocks * 512 <= 4 * MiB
    # each server's dacd copied its share, in its own namespaces (its own log), as the user
    # (the files are the user's: a copier as root would have had to chown them)
    statuses = store.statuses("121")
    generation = store.buffer("121").record.generation
    for host in (primary, other):
        report = statuses[host].share
        assert (report.step, report.generation, report.failed) == ("stage_in", generation, "")
    assert statuses[primary].share.done == [0] and statuses[other].share.done == [1]
    assert "stage_in shares 1 on " + other in dacd_log(site, other)[before[other] :]
    # the stage's progress is the primary's: every share's, the other's from its report
    progress, parts = statuses[primary].progress, statuses[other].share.parts
    assert statuses[other].progress is None and [p[0] for p in parts] == [1] and parts[0][1] > 0
    total = sum(f * 131 for f in range(60)) * 2 + 3 * MiB + 777 + 32 * MiB  # apparent sizes
    assert progress is not None and progress.bytes_done == progress.bytes_total == total
    assert store.stage_plan("121", "stage_in") is None  # dropped once done
    line = run("dacctl", "status", "121", "--line", env=env).stdout
    assert line.startswith("buffer 121: staged_in, staged ") and " 100% 124/124 files" in line

    slurm(env, "data_out", 121, "--job", str(script))
    got = seen(out / "run1")
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name] == expected[name], name
    statuses = store.statuses("121")
    assert statuses[other].share.step == "stage_out" and statuses[other].share.done == [1]
    assert "stage_out shares 1 on " + other in dacd_log(site, other)[before[other] :]
    slurm(env, "teardown", 121, "--job", str(script))
    wait_for(lambda: store.buffer("121") is None, 60, "the buffer reaped")
    assert store.stage_plan_buffers() == [] and pools(env)["p"]["free_bricks"] == 2


def test_mh_a_share_failing_on_the_other_server_fails_the_stage_in_one_line_naming_it(mh):
    """The heavier file is share 0 (the primary's); the lighter one, share 1, is root's and
    unreadable, so the other server's copier, as the user, cannot read it."""
    site, env, store = mh
    work = owned(site.root / "split122")
    src = owned(work / "src")
    write(src / "a", os.urandom(4 * MiB))
    write(src / "b", os.urandom(MiB))
    os.chown(src / "b", 0, 0)
    os.chmod(src / "b", 0o600)
    script = job_script(
        site, 122, f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in"
    )
    set_up(env, 122, script)
    primary, other = two_servers(store, 122)
    r = slurm(env, "data_in", 122, "--job", str(script), check=False)
    assert (r.returncode, r.stdout) == (
        1,
        f"buffer 122: stage_in failed on {other}: {src}/b: Permission denied\n",
    )
    statuses = store.statuses("122")
    assert statuses[other].share.failed == f"stage_in failed on {other}: {src}/b: Permission denied"
    assert store.stage_plan("122", "stage_in").failed  # every other share stops
    slurm(env, "teardown", 122, "--job", str(script), "--hurry")
    wait_for(lambda: store.buffer("122") is None, 60, "the buffer reaped")
    assert store.stage_plan_buffers() == [] and pools(env)["p"]["free_bricks"] == 2


def test_mh_a_dacd_killed_mid_share_and_started_again_resumes_its_share(mh):
    """The other server's dacd, its copier paced (the bench's DAC_BENCH_RATE) so its share
    lasts seconds, is killed (-9) as it copies and started again at once: it finds the plan
    from its passive claims (no spec change wakes it) and copies its share again; the stage
    ends as one copier's would."""
    site, env, store = mh
    src = paced_source(site, 123)
    script = job_script(
        site, 123, f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in"
    )
    set_up(env, 123, script)
    primary, other = two_servers(store, 123)
    paced = {"DAC_BENCH_RATE": str(12 * MiB)}
    site.restart_dacd(other, env=paced)
    try:
        call = data_in_in_background(env, 123, script)
        wait_for(lambda: copying(store, 123, other), 60, "the other server's share", every=0.05)
        before = len(dacd_log(site, other))
        site.restart_dacd(other, signal.SIGKILL, env=paced)
        out, err = call.communicate(timeout=180)
        assert (call.returncode, out) == (0, ""), err
        inside = Path(site.recorded.root) / primary / "fs" / "123" / "mnt" / "striped" / "in"
        assert {p.name: p.read_bytes() for p in inside.iterdir()} == {
            p.name: p.read_bytes() for p in src.iterdir()
        }
        assert "stage_in shares 1 on " + other in dacd_log(site, other)[before:]
        assert store.statuses("123")[other].share.done == [1]
    finally:
        site.restart_dacd(other)  # unpaced again, for the tests after
    slurm(env, "teardown", 123, "--job", str(script))
    wait_for(lambda: store.buffer("123") is None, 60, "the buffer reaped")
    assert store.stage_plan_buffers() == [] and pools(env)["p"]["free_bricks"] == 2


def test_mh_a_server_lost_mid_share_has_its_share_taken_over(mh):
    """The other server's dacd, its copier paced so its share lasts seconds, is killed (-9)
    as it copies and kept down: once its lease lapses the primary's dacd gives its unfinished
    share to a live owner (itself, the only one) and copies it; the waiting call rides the
    lost server out, and when the other dacd comes back (unpaced) the stage ends as one
    copier's would, counted once."""
    site, env, store = mh
    src = paced_source(site, 124)
    script = job_script(
        site, 124, f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in"
    )
    set_up(env, 124, script)
    primary, other = two_servers(store, 124)
    site.restart_dacd(other, env={"DAC_BENCH_RATE": str(12 * MiB)})
    back = False
    try:
        call = data_in_in_background(env, 124, script)
        wait_for(lambda: copying(store, 124, other), 60, "the other server's share", every=0.05)
        site.dacds[other].kill()
        site.dacds[other].wait(30)
        started = time.monotonic()
        wait_for(lambda: other not in store.alive(), 30, "its lease to lapse", every=0.1)
        lapsed = time.monotonic() - started
        said = f"stage_in share 1 of lost server {other} taken over by {primary}"

        def taken_over() -> bool:
            plan = store.stage_plan("124", "stage_in")
            if plan is None:  # the primary copied it at once and the stage ended: dropped
                return said in dacd_log(site, primary)
            return plan.owners == [primary, primary]

        wait_for(taken_over, 30, "the share taken over", every=0.1)
        taken = time.monotonic() - started
        print(f"lease lapsed {lapsed:.1f} s, share taken over {taken:.1f} s after the kill")
        assert taken < 5 + 3  # the lease's TTL (Site.config), and a look a second
        assert said in dacd_log(site, primary)
        # the call rides the lost server out (restart_grace); it comes back, unpaced
        site.restart_dacd(other)
        back = True
        out, err = call.communicate(timeout=180)
        assert (call.returncode, out) == (0, ""), err
        inside = Path(site.recorded.root) / primary / "fs" / "124" / "mnt" / "striped" / "in"
        assert {p.name: p.read_bytes() for p in inside.iterdir()} == {
            p.name: p.read_bytes() for p in src.iterdir()
        }
        assert store.statuses("124")[primary].share.done == [0, 1]
        line = run("dacctl", "status", "124", "--line", env=env).stdout
        assert line.startswith("buffer 124: staged_in, staged ") and " 100% 12/12 files" in line
    finally:
        if not back:  # up and unpaced, for the tests after
            site.restart_dacd(other)
    slurm(env, "teardown", 124, "--job", str(script))
    wait_for(lambda: store.buffer("124") is None, 60, "the buffer reaped")
    assert store.stage_plan_buffers() == [] and pools(env)["p"]["free_bricks"] == 2


def copying(store, token: int, host: str) -> bool:
    """True once `host`'s share of the stage under way has begun and is not done."""
    s = store.statuses(str(token)).get(host)
    report = s.share if s else None
    return (
        report is not None
        and report.generation == store.buffer(str(token)).record.generation
        and s.step == "stage_in"
        and not report.done
    )
