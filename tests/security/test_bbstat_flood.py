"""`scontrol show bbstat` (and `dwstat`) flooded by an unprivileged user about another
unprivileged user's job, through dac's answerer (issue 45, item 6: burst_buffer.lua's
slurm_bb_get_status asks it; burst_buffer/datawarp's GetSysStatus is dac's forwarder
slurm-plugin/dwstat.lua), with a real Slurm: 22.05 under both plugins, 24.11 under
burst_buffer/lua. Slurm 22.05 and datawarp name no caller, so every answer is the public line;
24.11 names the caller, and the owner alone gets the full line. The owner's paths and error text
never reach the flooder, whatever words it types (two numbers posing as 23.02's uid and gid
included), however fast it asks, and every answer came from the answerer, none from a fork."""

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
from clitools import BIN, run
from security.entry_helpers import ALICE, MALLORY, SECRET, Cluster

from dacservice.answerer.wire import ask

JOB = 990021
#: what the flooder asks, each from both of its processes, ROUNDS times
WORDS = [f"show bbstat {JOB}", f"show bbstat 0 0 {JOB}", f"show bbstat 5678 8765 {JOB}",
         "show bbstat sessions", "show bbstat"]  # fmt: skip
ROUNDS = 15
#: each flooder: every answer on stdout, one `@@` line after each
_LOOP = """scontrol=$1; rounds=$2; shift 2
i=0
while [ $i -lt $rounds ]; do
  for w in "$@"; do "$scontrol" $w 2>&1; echo @@; done
  i=$((i+1))
done
"""


class ReleaseCluster(Cluster):
    """entry_helpers' Cluster on Slurm `release` (a chroot's: `dacctl local env` puts its client
    commands first on PATH)."""

    def __init__(self, plugin: str, release: str):
        self.plugin, self.release = plugin, release
        self.workdir = Path(tempfile.mkdtemp(prefix=f"dac-bbflood-{plugin}-"))
        self.workdir.chmod(0o755)
        run("dacctl", "local", "up", "--workdir", str(self.workdir), "--servers", "2",
            "--bricks-per-server", "2", "--brick-size", "512MiB", "--slurm-nodes", "1",
            "--slurm-plugin", plugin, "--slurm-release", release, timeout=900)  # fmt: skip
        lines = run("dacctl", "local", "env", "--workdir", str(self.workdir)).stdout
        self.env = dict(line.removeprefix("export ").split("=", 1) for line in lines.splitlines())


@pytest.fixture(
    scope="module", params=[("lua", "22.05"), ("datawarp", "22.05"), ("lua", "24.11")], ids=str
)
def cluster(request):
    cluster = ReleaseCluster(*request.param)
    try:
        yield cluster
    finally:
        cluster.close()


def _stats(cluster) -> dict:
    sock = Path(cluster.workdir) / "slurm" / "answerer" / "socket"
    kind, rc, body, _ = ask(str(sock), "stats", [])
    assert (kind, rc) == ("ANSWER", 0), body
    return json.loads(body)


def _flood(cluster, user, words: list[str], rounds: int, processes: int = 2) -> list[str]:
    """`processes` loops of `scontrol <words>` as `user`, at once; every answer."""
    procs = [
        subprocess.Popen(
            ["/bin/sh", "-c", _LOOP, "flood", "scontrol", str(rounds), *words],
            stdout=subprocess.PIPE,
            text=True,
            user=user[0],
            group=user[1],
            extra_groups=[],
            cwd="/",
            env={"PATH": f"{BIN}:/usr/bin:/bin", **cluster.env},
        )
        for _ in range(processes)
    ]
    answers = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0
        answers += [a.strip() for a in out.split("@@\n") if a.strip()]
    assert len(answers) == processes * rounds * len(words)
    return answers


def _log(cluster, name: str) -> str:
    path = Path(cluster.workdir) / "slurm" / "log" / name
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_flood_through_the_answerer_never_shows_another_users_private_line(cluster, tmp_path):
    root_line = cluster.failed_buffer(tmp_path, JOB)  # MALLORY's buffer; its error names SECRET
    public = (
        root_line.strip().split(", failed: ")[0]
        + ", failed (its owner sees why with dacctl status)"
    )
    if cluster.plugin == "datawarp":  # GetSysStatus is the forwarder, not dac-bbstat
        conf = (Path(cluster.workdir) / "slurm" / "etc" / "burst_buffer.conf").read_text()
        assert f"GetSysStatus={cluster.workdir}/slurm/etc/dwstat\n" in conf, conf
    forks = (_log(cluster, "slurmctld.log").count("forking dac-bbstat"),
             _log(cluster, "dacctl.log").count("dac_dwstat:"))  # fmt: skip
    before = _stats(cluster)
    words = WORDS + (
        ["show dwstat sessions", "show dwstat"] if cluster.plugin == "datawarp" else []
    )
    answers = _flood(cluster, ALICE, words, ROUNDS)
    after = _stats(cluster)
    leaked = [a for a in answers if SECRET in a]
    assert leaked == [], leaked[:3]
    lines = [a for a in answers if a.startswith(f"buffer {JOB}:")]
    assert len(lines) == 2 * ROUNDS and set(lines) == {public}, set(lines)
    # "0 0 <job>": on 22.05 and under datawarp three words of the user's, not a caller
    assert sum(a.startswith("dac-bbstat: usage:") for a in answers) == 2 * 2 * ROUNDS
    # every answer the answerer's: none refused, none forked
    answered = sum(after.get(f"bbstat:{s}", 0) - before.get(f"bbstat:{s}", 0)
                   for s in ("mirror", "etcd"))  # fmt: skip
    assert answered == len(answers), (before, after)
    assert after.get("bbstat:refused", 0) == before.get("bbstat:refused", 0)
    assert forks == (_log(cluster, "slurmctld.log").count("forking dac-bbstat"),
                     _log(cluster, "dacctl.log").count("dac_dwstat:"))  # fmt: skip
    (own,) = _flood(cluster, MALLORY, [f"show bbstat {JOB}"], 1, processes=1)
    if cluster.release == "22.05":  # the owner is no one to 22.05 either: the public line
        assert own == public
    else:  # 23.02+ names the caller: the owner's own full line, error text and all
        assert own == root_line.strip() and SECRET in own
