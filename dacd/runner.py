"""Running a lifecycle step's playbook through ansible-runner: the only module that imports it.

A fresh private_data_dir per run: a shared one keeps state between runs (a `--check` left in its
env/cmdline puts every later run in check mode) and concurrent runs race on its files;
facts off, pipelining on, the backend's inventory (hosts over the local connection get this
interpreter unless the inventory names one), and PATH carrying the venv's ansible-playbook.
With a warm server (dacd/warm_ansible.py), runner starts its client as the ansible-playbook.
Runner events feed `on_task` (the task being run, for the buffer's status); a failure becomes
PlaybookFailed with the failing task and its output, bounded; hosts that did not answer over ssh
(`runner_on_unreachable`) become HostsUnreachable, naming them, and stop the run once the step
has run `ssh.unreachable_timeout` seconds.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from daccore.errors import HostsUnreachable, InternalError, PlaybookFailed
from daccore.share import asset
from dacd.warm_ansible import WarmAnsible

if TYPE_CHECKING:
    import ptyprocess
    import yaml
    from ansible_runner import Runner

    from daccore.backends.base import Vars
    from daccore.settings.config import SshSettings

log = logging.getLogger(__name__)

__all__ = ["RunStep", "playbooks", "run_step", "ssh_environment", "sweep_stale_runs"]


class RunStep(Protocol):
    """`run_step` as dacd passes it on (with its warm server bound, or a test's stand-in)."""

    def __call__(
        self,
        backend: str,
        step: str,
        host: str,
        extravars: Vars,
        on_task: Callable[[str], None] | None = None,
        inventory: Vars | None = None,
        forks: int = 20,
        *,
        ssh: SshSettings | None = None,
    ) -> None: ...


def playbooks() -> Path:
    """The installed playbooks/ directory (tests point it at their own)."""
    return asset("playbooks", directory=True)


def _no_nap_after_exit() -> None:
    """ansible-runner closes a playbook's pty after the process has ended, and ptyprocess then
    sleeps 0.1 s "to give the kernel time" to report a process that may still be exiting: a
    tenth of a warm step, measured (docs/performance.md). Skip the nap when the process is
    known to be gone; a live one is still given it."""
    import ptyprocess

    close = ptyprocess.PtyProcess.close
    if getattr(close, "dac_no_nap", False):
        return

    def close_without_nap(self: ptyprocess.PtyProcess, force: bool = True) -> None:
        if not self.isalive():
            self.delayafterclose = 0
        close(self, force)

    setattr(close_without_nap, "dac_no_nap", True)  # noqa: B010  (a function has no such slot)
    ptyprocess.PtyProcess.close = close_without_nap


def run_step(
    backend: str,
    step: str,
    host: str,
    extravars: Vars,
    on_task: Callable[[str], None] | None = None,
    inventory: Vars | None = None,
    forks: int = 20,
    warm: WarmAnsible | None = None,
    ssh: SshSettings | None = None,
) -> None:
    """Run playbooks/<backend>/<step>.yml for `host`'s dacd on `inventory`
    (default: this machine), through `warm`'s server when given, reaching other hosts as
    `ssh` says (default: daccore.settings.config's defaults); PlaybookFailed, naming the host whose
    task failed, or HostsUnreachable, naming those that did not answer, on failure."""
    from daccore.settings.config import SshSettings

    ssh = ssh or SshSettings()
    import ansible_runner  # ~100 ms: only dacd pays it

    _no_nap_after_exit()

    project = playbooks() / backend
    if not (project / f"{step}.yml").is_file():
        # every backend has every step: a missing one is a broken install, never a success
        raise InternalError(
            f"playbook {backend}/{step}.yml is missing from {project.parent}; reinstall dac"
        )
    failed: dict[str, Any] = {}  # the first failed task's: task, host, rc, output
    unreachable: dict[str, str] = {}  # host -> why
    touched: set[str] = set()  # hosts that ran a task of this step (it may have done something)
    started = time.monotonic()

    def event(ev: dict[str, Any]) -> bool:
        data = ev.get("event_data", {})
        kind = ev.get("event")
        if kind == "playbook_on_task_start" and on_task:
            on_task(data.get("task", ""))
        if (
            kind in _TOUCHED and data.get("host") and not data.get("res", {}).get("unreachable")
        ):  # a loop's items fail unreachable
            touched.add(data["host"])
        if kind == "runner_on_unreachable" and data.get("host"):
            res = data.get("res", {})  # a loop's reason is its first unreachable item's
            res = next((i for i in res.get("results") or [] if i.get("unreachable")), res)
            unreachable.setdefault(data["host"], str(res.get("msg", "")) or "no answer")
            log.warning(
                "%s: %s unreachable at task '%s': %s",
                step,
                data["host"],
                data.get("task", "?"),
                unreachable[data["host"]],
            )
        if kind == "runner_on_failed" and not failed:
            res = data.get("res", {})
            # a loop's failure is its first failed item's
            res = next((i for i in res.get("results") or [] if i.get("failed")), res)
            failed.update(
                task=data.get("task", "?"),
                host=data.get("host", host),
                rc=res.get("rc", -1),
                output="\n".join(
                    filter(None, [res.get("stdout", ""), res.get("stderr", ""), _reason(res)])
                ),
            )
        return True

    workdir = tempfile.mkdtemp(prefix=f"{_run_prefix(host)}{step}-")
    output = ""
    dacd = os.getpid()
    try:
        bindir = os.path.dirname(sys.executable)
        envvars = {
            "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/bin')}",
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_GATHERING": "explicit",
            **ssh_environment(ssh),
        }
        if warm is not None:  # first: it may move the client
            envvars["DAC_WARM_ANSIBLE"] = warm.ensure()
        # runner runs a `binary` as given: the playbook goes on its command line
        how = (
            {"playbook": f"{step}.yml"}
            if warm is None
            else {"binary": warm.client, "cmdline": f"{step}.yml"}
        )
        inventory_file = _write_unsafe(
            workdir,
            "inventory/hosts.yml",
            _with_interpreter(
                inventory or {"all": {"hosts": {host: {"ansible_connection": "local"}}}}
            ),
        )
        # runner passes an existing env/extravars as `-e @file`, and nothing else
        _write_unsafe(workdir, "env/extravars", extravars)
        r = ansible_runner.run(
            private_data_dir=workdir,
            project_dir=str(project),
            **how,
            inventory=inventory_file,
            event_handler=event,
            quiet=True,
            forks=forks,
            envvars=envvars,
            settings={"pexpect_timeout": 1},
            # a host found unreachable ends the step once it has run unreachable_timeout: the
            # other hosts have had their time, and the waiting Slurm call hears which host.
            # Never a delete: the live hosts must finish it for the bricks to be released
            # (dacd/owed.py); task_timeout bounds each of their tasks.
            cancel_callback=lambda: (
                step != "delete"
                and bool(unreachable)
                and time.monotonic() - started > ssh.unreachable_timeout
            ),
        )
        if (r.status != "successful" or r.rc != 0) and not failed:
            output = _stdout_tail(r)  # no task failed: ansible itself did (syntax, start-up)
    finally:
        _exit_if_forked(dacd)
        shutil.rmtree(workdir, ignore_errors=True)
    if unreachable and (r.status != "successful" or r.rc != 0):
        raise HostsUnreachable(
            step,
            host,
            unreachable,
            ssh.known_hosts,
            frozenset(touched),
            rest_done=not failed and r.status == "failed",
            servers=_hosts(inventory, clients=False),
        )
    if r.status != "successful" or r.rc != 0:
        where = failed.get("host", host)
        raise PlaybookFailed(
            step,
            failed.get("task", "(before any task)"),
            where,
            failed.get("rc", r.rc if r.rc is not None else -1),
            failed.get("output") or output or f"ansible-runner ended with status {r.status}",
            node=where in _hosts(inventory, clients=True),
        )


def _hosts(inventory: Vars | None, clients: bool) -> frozenset[str]:
    """The inventory's compute nodes (its `clients` group), or its other hosts (servers)."""
    groups = (inventory or {}).get("all", {}).get("children", {})
    return frozenset(
        h
        for name, group in groups.items()
        if (name == "clients") == clients
        for h in (group.get("hosts") or {})
    )


#: runner events of a host that ran a task (its connection worked, so it may have done it)
_TOUCHED = frozenset(
    {"runner_on_ok", "runner_on_failed", "runner_item_on_ok", "runner_item_on_failed"}
)


def ssh_environment(ssh: SshSettings) -> dict[str, str]:
    """Ansible's settings for reaching hosts as `ssh` says. ansible-runner turns host key
    checking off unless ANSIBLE_HOST_KEY_CHECKING is set; ssh takes the first value it is
    given for an option, and Ansible puts ssh_args first. The same for every run of a dacd,
    so the warm server's imported settings stay valid (dacd/warm_ansible.py)."""
    strict = "yes" if ssh.strict_host_keys else "no"
    args = [
        "-C",
        "-o",
        "ControlMaster=auto",
        "-o",
        "ControlPersist=60s",
        "-o",
        f"StrictHostKeyChecking={strict}",
        "-o",
        f"UserKnownHostsFile={ssh.known_hosts}",
        "-o",
        f"ServerAliveInterval={ssh.alive_interval}",
        "-o",
        f"ServerAliveCountMax={ssh.alive_count}",
        "-o",
        f"ConnectTimeout={ssh.connect_timeout}",
        "-o",
        "BatchMode=yes",
    ]
    return {
        "ANSIBLE_HOST_KEY_CHECKING": str(ssh.strict_host_keys),
        "ANSIBLE_SSH_ARGS": " ".join(args),
        "ANSIBLE_TIMEOUT": str(ssh.connect_timeout),
        "ANSIBLE_TASK_TIMEOUT": str(ssh.task_timeout),
    }


def _exit_if_forked(dacd: int) -> None:
    """End at once a child that pexpect forked for the playbook and whose set-up failed in
    Python before its exec: ptyprocess lets that exception rise through the child's copy of
    dacd, which would go on as a second dacd on the same lease, failing the step with a status
    the real one never wrote (seen: dacd killed just after the fork closes the pty's master; a
    child that ignores SIGHUP then gets EIO setting its window size)."""
    if os.getpid() != dacd:
        os._exit(127)


def _run_prefix(host: str) -> str:
    # '+' is in no host name, so the parts split back apart (see sweep_stale_runs); the pid
    # keeps the runs of two dacds posing as one host apart (local DACs side by side)
    return f"dac-run-{os.getpid()}+{host}+"


def sweep_stale_runs(host: str) -> int:
    """Remove what runs of a killed dacd of `host` left in the temp dir (a run removes its own
    private_data_dir unless killed); called at dacd start. A live process's runs are left."""
    swept = 0
    for entry in os.scandir(tempfile.gettempdir()):
        pid, _, rest = entry.name.removeprefix("dac-run-").partition("+")
        if not (
            entry.name.startswith("dac-run-") and pid.isdigit() and rest.startswith(f"{host}+")
        ):
            continue
        if int(pid) != os.getpid() and _running_dacd(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        swept += 1
    return swept


def _running_dacd(pid: str) -> bool:
    """Whether `pid` is a live dacd (not a zombie left by a kill -9, not a reused pid)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X") and b"dacd" in cmdline


def _reason(res: dict[str, Any]) -> str:
    """The line that says why a task failed (PlaybookFailed shows the last line of the output):
    the module's message, unless it is the command module's "non-zero return code", where the
    tool's own last words are better: stderr's, else stdout's (dfuse reports on stdout)."""
    msg = str(res.get("msg", ""))
    if msg and msg != "non-zero return code":
        return msg
    for stream in ("stderr", "stdout"):
        lines = [line for line in str(res.get(stream, "")).splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return msg


def _write_unsafe(workdir: str, name: str, data: Vars) -> str:
    """Write `data` as YAML with every string tagged `!unsafe`, so Ansible never templates
    it: values come from buffer records, and `{{ lookup('pipe', ...) }}` in one would run as
    root. ansible-runner itself writes dicts as JSON, where Ansible renders every string.
    Only admin-written config vars (daccore.backends.Templated) stay plain. Mapping keys are
    never templated by Ansible (measured with ansible-core 2.19), and are strict names."""
    import yaml

    path = os.path.join(workdir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        # in order: the inventory's host order is the order Ansible starts them in
        yaml.dump(data, f, Dumper=_unsafe_dumper(), default_flow_style=False, sort_keys=False)
    return path


@functools.cache
def _unsafe_dumper() -> type[yaml.SafeDumper]:
    import yaml

    from daccore.backends import Templated

    base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

    class UnsafeDumper(base):  # type: ignore[misc, valid-type]
        def represent_mapping(
            self, tag: str, mapping: Mapping[object, object], flow_style: bool | None = None
        ) -> yaml.MappingNode:
            # keys plain (inventory host names must stay names), values tagged
            node = super().represent_mapping(tag, mapping, flow_style)
            for key, _ in node.value:
                if key.tag == "!unsafe":
                    key.tag = "tag:yaml.org,2002:str"
            return node

    def unsafe(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
        # Ansible resolves an !unsafe scalar's type again as if untagged ('0700' would become
        # 448, '' None): such strings stay plain. None of them can hold a Jinja delimiter.
        if dumper.resolve(yaml.ScalarNode, text, (True, False)) != "tag:yaml.org,2002:str":
            return dumper.represent_str(text)
        return dumper.represent_scalar("!unsafe", text)

    UnsafeDumper.add_representer(str, unsafe)
    UnsafeDumper.add_representer(Templated, lambda d, s: d.represent_str(str(s)))
    return UnsafeDumper


def _with_interpreter(inventory: Vars) -> Vars:
    """Hosts reached over the local connection run modules with this interpreter (the venv's,
    which has what dac's modules import), unless the inventory says otherwise."""

    def walk(group: Vars) -> None:
        for hostvars in (group.get("hosts") or {}).values():
            if hostvars.get("ansible_connection") == "local":
                hostvars.setdefault("ansible_python_interpreter", sys.executable)
        for child in (group.get("children") or {}).values():
            walk(child)

    for group in inventory.values():
        walk(group)
    return inventory


def _stdout_tail(r: Runner, limit: int = 8000) -> str:
    try:
        tail: str = r.stdout.read()[-limit:]
        return tail
    except (OSError, AttributeError, ValueError):
        return ""
