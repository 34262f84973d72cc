"""dacd reaching a host over ssh as a site wants it (docs/admin.md, "Host keys"): a real sshd on
a loopback port, real ansible-runner and Ansible's ssh connection, through dacd.runner.

Host keys are checked against the admin's known_hosts (a missing or different key is refused
before any command runs there); a host that does not answer, or stops answering in the middle
of a command, is named in one line within the bound (ssh.unreachable_timeout), and the step
ends then even while other hosts still work.
"""

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sshd import Sshd, keygen

from daccore.errors import HostsUnreachable
from daccore.settings.config import SshSettings
from dacd import runner

PLAY = """- hosts: all
  gather_facts: false
  tasks:
    - name: leave a mark
      ansible.builtin.command:
        argv: [touch, "{{ out }}/{{ inventory_hostname }}.mark"]
    - name: work a while
      ansible.builtin.command:
        argv: [sleep, "{{ work_seconds }}"]
      when: work_seconds | int > 0
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A node reached over ssh (node1: an sshd on 127.0.0.1), the client's key, an empty
    known_hosts, and a probe playbook that runs on every host of the inventory."""
    (tmp_path / "playbooks" / "probe").mkdir(parents=True)
    (tmp_path / "playbooks" / "probe" / "step.yml").write_text(PLAY)
    monkeypatch.setattr(runner, "playbooks", lambda: tmp_path / "playbooks")
    key = keygen(tmp_path / "id_dacd")
    server = Sshd(tmp_path / "node1", Path(f"{key}.pub")).start()
    out = tmp_path / "out"
    out.mkdir()
    known = tmp_path / "known_hosts"
    known.write_text("")
    yield server, key, known, out
    server.stop()


def inventory(server, key, with_local=False):
    hosts = {
        "node1": {
            "ansible_host": server.address,
            "ansible_port": server.port,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(key),
            "ansible_python_interpreter": "/usr/bin/python3",
        }
    }
    if with_local:
        hosts["dac1"] = {"ansible_connection": "local"}
    return {"all": {"hosts": hosts}}


def run(server, key, out, ssh, work=0, with_local=False):
    runner.run_step(
        "probe",
        "step",
        "dac1",
        {"out": str(out), "work_seconds": work},
        inventory=inventory(server, key, with_local),
        ssh=ssh,
    )


def ssh_clients(port: int) -> list[str]:
    ps = subprocess.run(["ps", "-e", "-o", "args="], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if line.startswith("ssh ") and f"Port={port}" in line]


def test_ssh_a_node_whose_key_the_admin_listed_runs_the_step(site):
    server, key, known, out = site
    known.write_text(server.known_hosts_line())
    run(server, key, out, SshSettings(known_hosts=str(known)))
    assert (out / "node1.mark").exists()


@pytest.mark.parametrize("listed", ["another key", "no key"])
def test_ssh_a_node_whose_host_key_is_not_the_listed_one_is_refused(site, tmp_path, listed):
    """The site's known_hosts is the truth: a node presenting another key (or one never
    listed) gets no command, and the line names the node, the file and who acts."""
    server, key, known, out = site
    if listed == "another key":
        other = keygen(tmp_path / "impostor")
        known.write_text(
            f"[{server.address}]:{server.port} "
            f"{' '.join(Path(f'{other}.pub').read_text().split()[:2])}\n"
        )
    with pytest.raises(HostsUnreachable) as e:
        run(server, key, out, SshSettings(known_hosts=str(known)))
    message = str(e.value)
    assert message.startswith("step failed on dac1: node1 unreachable over ssh (")
    assert "Host key verification failed" in message and str(known) in message
    assert "an admin must check node1 and put its current host key in" in message
    assert "\n" not in message and e.value.hosts == ["node1"]
    assert not (out / "node1.mark").exists()  # nothing ran there
    # with checking off (as Ansible's default), the same node would have been used
    run(server, key, out, SshSettings(known_hosts=str(known), strict_host_keys=False))
    assert (out / "node1.mark").exists()


def test_ssh_a_node_that_does_not_answer_is_named_within_its_connect_timeout(site):
    """sshd stopped (the kernel still accepts the connection, nothing answers): the banner
    never comes, so ConnectTimeout ends it."""
    server, key, known, out = site
    known.write_text(server.known_hosts_line())
    server.signal_all(signal.SIGSTOP)
    ssh = SshSettings(known_hosts=str(known), connect_timeout=3)
    started = time.monotonic()
    with pytest.raises(HostsUnreachable) as e:
        run(server, key, out, ssh)
    took = time.monotonic() - started
    assert took < ssh.unreachable_timeout, took
    assert "node1 unreachable over ssh" in str(e.value)
    assert "an admin must bring node1 back" in str(e.value)
    assert e.value.touched == frozenset()  # it ran nothing of the step


def test_ssh_a_node_that_stops_answering_mid_command_ends_the_step_within_60s(site):
    """The node goes silent while its command runs (every sshd process stopped: no reply,
    no reset). With the default settings, ssh's keepalives give it up after 15 s and the
    step ends well within the default bound of 60 s, naming the node; no ssh session to it
    is left."""
    server, key, known, out = site
    known.write_text(server.known_hosts_line())
    ssh = SshSettings(known_hosts=str(known))
    assert ssh.unreachable_timeout == 60

    def stop_when_marked():
        deadline = time.monotonic() + 60
        while not (out / "node1.mark").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)  # the long command is running
        server.signal_all(signal.SIGSTOP)

    threading.Thread(target=stop_when_marked, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(HostsUnreachable) as e:
        run(server, key, out, ssh, work=300)
    took = time.monotonic() - started
    assert took < 60, took
    assert "node1 unreachable over ssh" in str(e.value) and e.value.touched == {"node1"}
    deadline = time.monotonic() + 10
    while ssh_clients(server.port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ssh_clients(server.port) == []


def test_ssh_a_step_that_met_an_unreachable_node_ends_at_the_bound_while_others_work(site):
    """Another host still works (a long task on dac1): once node1 is found unreachable the
    step is stopped at unreachable_timeout after its start, not when dac1 is done."""
    server, key, known, out = site
    known.write_text(server.known_hosts_line())
    server.signal_all(signal.SIGSTOP)
    ssh = SshSettings(
        known_hosts=str(known),
        connect_timeout=2,
        alive_interval=1,
        alive_count=2,
        unreachable_timeout=8,
    )
    started = time.monotonic()
    with pytest.raises(HostsUnreachable) as e:
        run(server, key, out, ssh, work=120, with_local=True)
    took = time.monotonic() - started
    assert 8 <= took < 30, took  # stopped at the bound, not after the 120 s task
    assert e.value.hosts == ["node1"] and "dac1" in e.value.touched
    assert (out / "dac1.mark").exists() and not (out / "node1.mark").exists()
