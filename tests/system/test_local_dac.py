import json
import os
import signal
import subprocess
import time
from pathlib import Path

from clitools import pools, run

from daclocal.loopdev import backing_file
from daclocal.procs import is_running

#: an unprivileged user of no group of root's (a uid no account needs to exist for)
USER_UID = 4321


def test_up_registers_every_server_and_down_leaves_nothing_behind(local_dac):
    workdir, env = local_dac
    assert set(env) == {"DAC_CONFIG", "DAC_ETCD_ENDPOINTS"}
    p = pools(env)["default"]
    assert (p["hosts_up"], p["total_bricks"], p["free_bricks"]) == (2, 8, 8)
    assert p["granularity"] == 512 << 20 and p["backend"] == "local"
    status = json.loads(
        run("dacctl", "local", "status", "--workdir", str(workdir), "--json").stdout
    )
    assert status["etcd"]["running"] and all(d["running"] for d in status["dacd"])
    assert len(status["bricks"]) == 8 and all(b["attached"] for b in status["bricks"])
    state = json.loads((workdir / "state.json").read_text())

    out = run("dacctl", "local", "down", "--workdir", str(workdir)).stdout
    assert "etcd" in out and "dacd dac-server-1" in out
    pids = [d["pid"] for d in state["dacd"]] + [state["etcd"]["pid"]]
    assert not any(is_running(pid) for pid in pids)
    assert all(backing_file(b["device"]) != b["file"] for b in state["bricks"])
    assert not (workdir / "state.json").exists() and not (workdir / "bricks").exists()
    again = run("dacctl", "local", "down", "--workdir", str(workdir)).stdout
    assert "nothing running" in again


def test_a_second_up_in_the_same_workdir_is_refused(local_dac):
    workdir, _ = local_dac
    r = run("dacctl", "local", "up", "--workdir", str(workdir), check=False)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"dacctl: admin error: a local DAC already runs in {workdir}: "
        f"run `dacctl local down --workdir {workdir}` first"
    )


def test_a_killed_dacd_drops_out_of_the_pools_when_its_lease_expires(local_dac):
    workdir, env = local_dac
    state = json.loads((workdir / "state.json").read_text())
    os.kill(state["dacd"][0]["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10  # lease_ttl is 5 s in the local DAC
    while pools(env)["default"]["hosts_up"] != 1:
        assert time.monotonic() < deadline, "the dead server's lease never expired"
        time.sleep(0.2)
    p = pools(env)["default"]
    assert (p["hosts_down"], p["total_bricks"], p["free_bricks"]) == (1, 4, 4)


def test_a_stopped_dacd_leaves_at_once(local_dac):
    workdir, env = local_dac
    state = json.loads((workdir / "state.json").read_text())
    os.kill(state["dacd"][1]["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 2  # revoked, not waited out
    while pools(env)["default"]["hosts_up"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_dacd_refuses_a_brick_device_that_does_not_exist(local_dac, tmp_path):
    _, env = local_dac
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(
        Path(env["DAC_CONFIG"])
        .read_text()
        .replace(
            "dac-server-1:",
            "ghost:\n    bricks:\n    - {device: /dev/nvme9n9, capacity: 512MiB}\n  dac-server-1:",
            1,
        )
    )
    r = run("dacd", "--config", str(cfg), "--host", "ghost", check=False, timeout=30)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "dacd: admin error: hosts.ghost.bricks[0].device: '/dev/nvme9n9' does not exist"
    )
    p = pools(env)["default"]  # the ghost registered nothing
    assert (p["hosts_up"], p["hosts_down"], p["total_bricks"]) == (2, 0, 8)


def test_dacd_refuses_a_host_missing_from_the_config(local_dac):
    _, env = local_dac
    r = run("dacd", "--config", env["DAC_CONFIG"], "--host", "nobody", check=False)
    assert r.returncode == 2
    assert (
        "hosts.nobody: this host is not in the config (hosts: dac-server-1, dac-server-2)"
        in r.stderr
    )


def test_bad_input_to_dacctl_is_one_line_and_non_zero(tmp_path):
    bad = tmp_path / "dac.yaml"
    bad.write_text("pools:\n  fast: {granularity: lots}\n")
    r = run("dacctl", "pools", env={"DAC_CONFIG": str(bad)}, check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        f"dacctl: admin error: invalid config {bad}: pools.fast.granularity: "
        "must be a size like 1TiB, 500GB or 1048576\n"
    )
    r = run(
        "dacctl", "local", "up", "--brick-size", "0x", "--workdir", str(tmp_path / "w"), check=False
    )
    assert r.returncode == 2 and "'0x' has an unknown unit" in r.stderr
    assert "Traceback" not in r.stderr


def test_dacctl_with_etcd_down_says_so_in_bounded_time(tmp_path):
    cfg = tmp_path / "dac.yaml"
    (tmp_path / "admin").write_text("admin:secret\n")  # a credential, so etcd is the fault
    cfg.write_text(
        f"etcd: {{endpoints: ['127.0.0.1:1'], timeout: 1, credentials_dir: {tmp_path}}}\n"
    )
    start = time.monotonic()
    r = run("dacctl", "pools", env={"DAC_CONFIG": str(cfg), "DAC_ETCD_ENDPOINTS": ""}, check=False)
    assert time.monotonic() - start < 5
    assert r.returncode == 2
    assert r.stderr.startswith("dacctl: admin error: etcd unreachable at http://127.0.0.1:1 ")
    assert r.stderr.count("\n") == 1


def test_a_user_runs_dacctl_from_the_workdir_whatever_interpreter_root_has(local_dac):
    # DIR/bin/dacctl: an interpreter and import paths every user can reach (daclocal/userbin.py)
    workdir, env = local_dac
    launcher = workdir / "bin" / "dacctl"
    status = json.loads(
        run("dacctl", "local", "status", "--workdir", str(workdir), "--json").stdout
    )
    assert status["users_dacctl"] == str(launcher)
    st = launcher.stat()
    assert st.st_uid == 0 and st.st_mode & 0o777 == 0o755
    r = subprocess.run(
        [str(launcher), "pools", "--json"],
        user=USER_UID,
        group=USER_UID,
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "DAC_CONFIG": env["DAC_CONFIG"]},
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["pools"][0]["name"] == "default"
