"""Budget: dacd resident memory <= 150 MB with 50 live buffers.

One dacd (local DAC, one server with 50 loop bricks of 512 MiB) builds 50 real xfs buffers,
requested by 50 concurrent `dacctl --function setup` calls; its resident set (VmRSS) and peak
(VmHWM) are read from /proc once all 50 are live, then everything is torn down. dacd's warm
Ansible server is a long-lived child, so it counts: the figure is dacd's plus the server's.
The playbook runs it forks come and go with each step and are not counted.

    .venv/bin/python bench/dacd_memory.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import local_dac, many_jobs, steal_meter  # noqa: E402

BUDGET_MB = 150.0
BUFFERS = 50


def memory_mb(pid: int) -> dict[str, float]:
    fields = dict(
        line.split(":", 1)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":" in line
    )
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}


def warm_server(dacd: int) -> int:
    """The pid of dacd's warm Ansible server (dacd/warm_ansible.py)."""
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and b"dacd.warm_ansible" in (proc / "cmdline").read_bytes()
                and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == dacd
            ):
                return int(proc.name)
        except OSError:
            continue
    raise SystemExit("dacd runs no warm Ansible server")


def main() -> int:
    with local_dac(servers=1, bricks_per_server=BUFFERS) as (state, env, work):
        pid = state.dacd[0]["pid"]
        idle = memory_mb(pid)
        cpu = steal_meter()
        start = time.perf_counter()
        rcs = [r.returncode for r in many_jobs(env, work, "setup", BUFFERS)]
        built_s = time.perf_counter() - start
        mounted = sum(
            1 for line in Path("/proc/mounts").read_text().splitlines() if f"{work}/dac/fs/" in line
        )
        live, server = memory_mb(pid), memory_mb(warm_server(pid))
        rcs += [r.returncode for r in many_jobs(env, work, "teardown", BUFFERS)]
        after, server_after = memory_mb(pid), memory_mb(warm_server(pid))
    print(
        f"{rcs[:BUFFERS].count(0)} of {BUFFERS} setups ready in {built_s:.1f} s, "
        f"{mounted} filesystems mounted; teardowns ok: {rcs[BUFFERS:].count(0)}"
    )
    print(
        f"dacd RSS: idle {idle['VmRSS']:.1f} MB, with {BUFFERS} live buffers "
        f"{live['VmRSS']:.1f} MB (peak {live['VmHWM']:.1f} MB), after teardown "
        f"{after['VmRSS']:.1f} MB (peak {after['VmHWM']:.1f} MB)"
    )
    print(
        f"warm Ansible server RSS: with {BUFFERS} live buffers {server['VmRSS']:.1f} MB, "
        f"after teardown {server_after['VmRSS']:.1f} MB (peak {server_after['VmHWM']:.1f} MB)"
    )
    print(cpu())
    peak = max(live["VmHWM"], after["VmHWM"]) + server_after["VmHWM"]
    ok = rcs.count(0) == 2 * BUFFERS and mounted == BUFFERS and peak <= BUDGET_MB
    print(
        f"dacd + warm server peak resident {peak:.1f} MB, budget {BUDGET_MB:.0f} MB: "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
