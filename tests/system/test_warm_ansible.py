"""dacd's warm Ansible server (dacd/warm_ansible.py) driven through ansible-runner as dacd drives
it: same events, exit codes and failures as a fresh ansible-playbook; cold when it must be; a
killed client stops its run; the server leaves with dacd."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import ansible_runner
import pytest

from dacd.warm_ansible import WarmAnsible

PLAY = """- hosts: all
  gather_facts: false
  tasks:
    - name: {name}
      command: {command}
"""


@pytest.fixture
def warm(tmp_path):
    log = open(tmp_path / "server.log", "w+")
    server = WarmAnsible(log=log)
    server.ensure()
    for _ in range(100):  # listening in well under a second
        if os.path.exists(server.socket):
            break
        time.sleep(0.05)
    yield server, tmp_path / "server.log"
    server.stop()
    log.close()


def runner(
    project: Path,
    playbook: str,
    server: WarmAnsible | None,
    extra_env=None,
    unstarted: WarmAnsible | None = None,
    **kwargs,
):
    """ansible-runner as dacd runs it: through the client when given a server (started, or
    not), else a fresh ansible-playbook; (result, task names and failures seen as events)."""
    tasks: list[str] = []

    def event(ev):
        if ev.get("event") == "playbook_on_task_start":
            tasks.append(ev["event_data"]["task"])
        if ev.get("event") == "runner_on_failed":
            tasks.append("FAILED " + ev["event_data"]["res"].get("stderr", ""))
        return True

    env = {
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_GATHERING": "explicit",
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        **(extra_env or {}),
    }
    how = {"playbook": playbook}
    if server is not None:
        env["DAC_WARM_ANSIBLE"] = server.ensure()
        how = {"binary": server.client, "cmdline": playbook}
    elif unstarted is not None:
        env["DAC_WARM_ANSIBLE"] = unstarted.socket
        how = {"binary": unstarted.client, "cmdline": playbook}
    data = project.parent / f"data-{time.monotonic_ns()}"
    data.mkdir()
    r = ansible_runner.run(
        private_data_dir=str(data),
        project_dir=str(project),
        **how,
        inventory={
            "all": {
                "hosts": {
                    "h": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                    }
                }
            }
        },
        event_handler=event,
        quiet=True,
        envvars=env,
        **kwargs,
    )
    return r, tasks


def runs(log: Path) -> list[str]:
    return [
        line.split(": run ", 1)[1].split(":")[0].split()[1]
        for line in log.read_text().splitlines()
        if ": run " in line
    ]


def test_a_warm_run_reports_what_a_fresh_ansible_playbook_does(warm, tmp_path):
    server, log = warm
    project = tmp_path / "project"
    project.mkdir()
    (project / "ok.yml").write_text(PLAY.format(name="say hello", command="echo hello"))
    (project / "bad.yml").write_text(PLAY.format(name="fail here", command="ls /no/such/dac/path"))
    results = {}
    for how in ("cold", "warm", "warm again"):
        for playbook in ("ok.yml", "bad.yml"):
            r, tasks = runner(project, playbook, None if how == "cold" else server)
            results[(how, playbook)] = (r.status, r.rc, tasks)
    assert results[("cold", "ok.yml")] == ("successful", 0, ["say hello"])
    assert results[("cold", "bad.yml")][:2] == ("failed", 2)
    assert "No such file or directory" in results[("cold", "bad.yml")][2][1]
    for how in ("warm", "warm again"):
        for playbook in ("ok.yml", "bad.yml"):
            assert results[(how, playbook)] == results[("cold", playbook)]
    assert runs(log) == ["warm"] * 4
    # Ansible's temp dirs go where Ansible puts them, never into the playbooks' folder
    assert sorted(p.name for p in project.iterdir()) == ["bad.yml", "ok.yml"]


def test_a_run_whose_ansible_settings_differ_runs_cold(warm, tmp_path):
    server, log = warm
    project = tmp_path / "project"
    project.mkdir()
    (project / "ok.yml").write_text(PLAY.format(name="t", command="/bin/true"))
    assert runner(project, "ok.yml", server)[0].rc == 0
    r, tasks = runner(project, "ok.yml", server, {"ANSIBLE_FORCE_COLOR": "1"})
    assert (r.status, r.rc, tasks) == ("successful", 0, ["t"])
    assert runs(log) == ["warm", "cold"]


def test_without_a_server_the_client_runs_ansible_itself(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "ok.yml").write_text(PLAY.format(name="t", command="/bin/true"))
    server = WarmAnsible()  # never started: nobody listens on its socket
    try:
        r, tasks = runner(project, "ok.yml", None, unstarted=server)
    finally:
        server.stop()
    assert (r.status, r.rc, tasks) == ("successful", 0, ["t"])


def test_a_removed_directory_moves_the_server_to_a_new_one(warm, tmp_path, caplog):
    """Its directory removed under a live dacd (a temp cleaner; seen once in make test, where
    every later step of that dacd then failed with rc 127): the next step moves the client and
    the server to a new directory and runs; the old server is gone; the runs after are warm."""
    server, log = warm
    project = tmp_path / "project"
    project.mkdir()
    (project / "ok.yml").write_text(PLAY.format(name="t", command="/bin/true"))
    old_dir, old_proc = os.path.dirname(server.client), server._proc
    shutil.rmtree(old_dir)
    r, tasks = runner(project, "ok.yml", server)
    assert (r.status, r.rc, tasks) == ("successful", 0, ["t"])
    assert os.path.dirname(server.client) != old_dir and os.path.isfile(server.client)
    assert old_proc.wait(10) == 0
    for _ in range(100):  # the new server listening
        if os.path.exists(server.socket):
            break
        time.sleep(0.05)
    r, tasks = runner(project, "ok.yml", server)
    assert (r.status, r.rc, tasks) == ("successful", 0, ["t"])
    assert runs(log)[-1] == "warm"
    assert f"{old_dir} was removed: warm Ansible moves to a new directory" in caplog.text


def test_a_killed_client_stops_its_run(warm, tmp_path):
    server, log = warm
    project = tmp_path / "project"
    project.mkdir()
    marker = f"sleep 3{os.getpid() % 1000:03d}.5"  # a command line only this test runs
    (project / "slow.yml").write_text(PLAY.format(name="sleep", command=marker))
    r, tasks = runner(project, "slow.yml", server, timeout=3)  # runner kills its client
    assert r.status == "timeout"
    deadline = time.monotonic() + 10
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(marker), "the playbook's command outlived its client"


def test_the_server_leaves_with_dacd(tmp_path):
    server = WarmAnsible()
    server.ensure()
    proc = server._proc
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()  # what dacd's death does to the pipe, kill -9 included
    assert proc.wait(10) == 0
    server.stop()
    assert not os.path.exists(os.path.dirname(server.socket))


def _running(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0
