"""dac's answerer (issue 34) against a real local DAC: job_process, pools and paths answered
over its socket exactly as the forked `dacctl --function` answers them (exit status, stdout,
stderr, the path file's bytes), for every directive case the suite uses and hundreds of
generated scripts (tests/fuzzgen.py); answers that follow etcd's changes, a config edited
under it, and a refusal, within its bound, when etcd is out of reach."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fuzzgen import job_scripts
from fuzzrun import as_process, local_dac
from lua_answerer import raw_request

from dacservice.answerer.published import valid_name
from dacservice.answerer.wire import MAX_SCRIPT, ask

BIN = Path(sys.executable).parent

#: the directive cases tests/system/test_datawarp_protocol.py, tests/store/test_jobs.py and
#: the e2e tests submit, each a whole script (a {home} for the stage lines)
CASES = [
    "#!/bin/bash\n#SBATCH -N 2\n#DW jobdw capacity=600MiB access_mode=striped,private "
    "type=scratch\n#DW stage_in type=directory source={home}/in destination=$DW_JOB_STRIPED/in\n"
    "#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination={home}/out\nsrun x\n",
    "#!/bin/sh\n#DW jobdw capacity=100MiB access_mode=striped type=scratch pool=default\n",
    "#!/bin/sh\n#DW jobdw capacity=1GiB access_mode=private pool=default\n",
    "#!/bin/sh\n#DW jobdw capacity=100TiB access_mode=striped pool=default\n",
    "#!/bin/sh\n#DW jobdw capacity=1GiB access_mode=striped pool=nosuch\n",
    "#!/bin/sh\n#DW jobdw capacity=0GiB access_mode=striped\n",
    "#!/bin/sh\n#DW jobdw capacity=1GiB access_mode=sideways\n",
    "#!/bin/sh\n#DW jobdw capacity=1GiB\n#DW jobdw capacity=1GiB\n",
    "#!/bin/sh\n#DW jobdw capacity=1GiB type=cache\n",
    "#!/bin/sh\n#DW persistentdw name=proj1\n",
    "#!/bin/sh\n#DW persistentdw name=nosuch\n",
    "#!/bin/sh\n#DW jobdw capacity=1GiB\n#DW persistentdw name=proj1\n#DW swap 1GiB\n",
    "#!/bin/sh\n#DW swap 100TiB\n#DW jobdw capacity=1GiB\n",
    "#!/bin/sh\n#BB create_persistent name=p2 capacity=512MiB access=striped type=scratch\n",
    "#!/bin/sh\n#BB create_persistent name=9bad capacity=1GiB\n",
    "#!/bin/sh\n#BB destroy_persistent name=proj1\n",
    "#!/bin/sh\n#BB destroy_persistent name=nosuch\n",
    "#!/bin/sh\n#DW stage_in type=file source=/etc/hosts\n",
    "#!/bin/sh\n#DW frobnicate now\n",
    "#!/bin/sh\necho no directives at all\n",
    "",
]


class Answerer:
    def __init__(self, env: dict, path: Path):
        self.path, self.env = path, env
        self.log = open(path.parent.parent / "answerer.log", "ab")
        self.proc = subprocess.Popen(
            [str(BIN / "dac-answerer"), "--socket", str(path)],
            env={**os.environ, **env},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.wait_fresh()

    def wait_fresh(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if json.loads(ask(str(self.path), "stats", [])[2])["fresh"]:
                    return
            except (OSError, ValueError):
                pass
            assert self.proc.poll() is None, "dac-answerer exited"
            time.sleep(0.05)
        raise AssertionError("the answerer's mirror never became current")

    def stats(self) -> dict:
        return json.loads(ask(str(self.path), "stats", [])[2])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)
        self.log.close()
        assert pools_file(self) is None  # not left to be believed for its last second
        assert not (self.path.parent / "paths").exists()  # nor its paths files
        assert not (self.path.parent / "valid").exists()  # nor its valid files


@pytest.fixture(scope="module")
def dac():
    """A local DAC with uid 1000's persistent buffer proj1 and job 7's striped,private
    buffer; an answerer on it. Yields (workdir, env, answerer, scratch directory)."""
    with local_dac() as (workdir, env):
        fn(env, "create_persistent", "--token", "proj1", "--caller", "CLI", "--user", "1000",
           "--capacity", "default:512MiB")  # fmt: skip
        scratch = workdir.parent / "scripts"
        scratch.mkdir()
        job7 = scratch / "job7.sh"
        job7.write_text("#!/bin/sh\n#DW jobdw capacity=100MiB access_mode=striped,private\n"
                        "#DW persistentdw name=proj1\n")  # fmt: skip
        fn(env, "setup", "--token", "7", "--caller", "SLURM", "--user", "1000", "--groupid",
           "1000", "--capacity", "default:100MiB", "--job", str(job7))  # fmt: skip
        a = Answerer(env, workdir.parent / "run" / "socket")
        try:
            yield workdir, env, a, scratch
        finally:
            a.stop()


def fn(env, function, *args):
    rc, out, err = as_process(["--function", function, *args], env)
    assert rc == 0, (function, out, err)
    return out


def both(dac, function, args, carried=False):
    """The forked dacctl's (rc, stdout, stderr) and the answerer's, for the same call;
    `carried`: the job script sent with the request, as burst_buffer.lua sends it."""
    _, env, a, _ = dac
    forked = as_process(["--function", function, *args], env)
    script = None
    if carried:  # as burst_buffer.lua: a script longer than MAX_SCRIPT is not sent
        with open(args[args.index("--job") + 1], "rb") as f:
            script = f.read()
        script = script if len(script) <= MAX_SCRIPT else None
    reply = ask(str(a.path), function, args, script=script)
    assert reply[0] == "ANSWER", reply
    return forked, reply[1:]


def test_job_process_answers_every_directive_case_as_the_fork_does(dac):
    workdir, _, a, scratch = dac
    scripts = [c.format(home=workdir.parent).encode() for c in CASES]
    scripts += job_scripts(random.Random(34), 150)
    before = a.stats().get("job_process:mirror", 0)
    differ = []
    for i, script in enumerate(scripts):
        path = scratch / f"jp{i}.sh"
        path.write_bytes(script)
        for user in ([], ["--user", "1000"], ["--user", "1001"]) if i < len(CASES) else ([],):
            for carried in (False, True):  # the script read by the answer, or sent with it
                forked, answered = both(dac, "job_process", ["--job", str(path), *user], carried)
                if forked != answered:
                    differ.append((script[:200], user, carried, forked, answered))
    assert differ == []
    forked, answered = both(dac, "job_process", ["--job", str(scratch / "absent.sh")])
    assert forked == answered and forked[0] == 1
    forked, answered = both(dac, "job_process", [])  # no --job: the usage line
    assert forked == answered and forked[0] == 1
    # the answers came from the mirror, not from etcd
    assert a.stats()["job_process:mirror"] - before >= len(scripts)


def test_a_valid_job_process_kept_is_checked_again_once_etcd_changes(dac):
    """The answerer keeps a valid job_process answer by the mirror's content (answers.py,
    VALID_KEPT): another user's buffer of the name the script attaches turns it into a refusal
    as soon as the mirror holds it, as the fork says."""
    _, env, a, scratch = dac
    job = scratch / "jp-kept.sh"
    job.write_text("#!/bin/sh\n#DW jobdw capacity=100MiB access_mode=striped\n"
                   "#DW persistentdw name=kept9\n")  # fmt: skip
    args = ["--job", str(job), "--user", "1000"]
    kept = a.stats().get("job_process:kept", 0)
    for _ in range(3):  # a buffer not made yet is no error at submission: valid, and kept
        forked, answered = both(dac, "job_process", args, carried=True)
        assert forked == answered and forked[0] == 0
    assert a.stats()["job_process:kept"] > kept  # (unless every call saw another change)
    # and in its valid file, which burst_buffer.lua reads instead of asking (published.py)
    valid = a.path.parent / "valid" / valid_name("--user 1000", job.read_bytes())
    want = b"dac-valid/1 11 %d\n--user 1000" % len(job.read_bytes()) + job.read_bytes()
    deadline = time.monotonic() + 5
    while not (valid.exists() and valid.read_bytes() == want):
        assert time.monotonic() < deadline, "no valid file of the kept answer"
        both(dac, "job_process", args, carried=True)  # kept again, if the mirror moved
        time.sleep(0.05)
    fn(env, "create_persistent", "--token", "kept9", "--caller", "CLI", "--user", "1001",
       "--capacity", "default:512MiB")  # fmt: skip
    try:
        deadline = time.monotonic() + 5
        while (reply := ask(str(a.path), "job_process", args, script=job.read_bytes()))[1] == 0:
            assert time.monotonic() < deadline, "the kept answer outlived the change"
            time.sleep(0.02)
        while valid.exists():  # gone within PUBLISH_EVERY of the mirror's change
            assert time.monotonic() < deadline, "the valid file outlived the change"
            time.sleep(0.02)
        forked, answered = both(dac, "job_process", args, carried=True)
        assert forked == answered and forked[0] == 1 and reply[1:] == answered
        assert "belongs to another user" in forked[1]
    finally:
        fn(env, "teardown", "--token", "kept9", "--job", str(job))
    forked, answered = both(dac, "job_process", args)
    assert forked == answered and forked[0] == 0


def pools_file(a: Answerer):
    """(exit status, stdout) of the answerer's pools file (publisher.py), None when there is
    none; its expiry 1-2 s ahead, its length whole."""
    try:
        data = (a.path.parent / "pools").read_bytes()
    except FileNotFoundError:
        return None
    head, _, body = data.partition(b"\n")
    magic, expires, rc, n = head.split()
    assert magic == b"dac-pools/1" and 0 < int(expires) - time.time() <= 2, head
    assert len(body) == int(n), data
    return int(rc), body.decode()


def file_says(a: Answerer, forked, timeout: float = 3.0) -> None:
    """The pools file comes to hold the fork's answer (rewritten every PUBLISH_EVERY)."""
    deadline = time.monotonic() + timeout
    while (seen := pools_file(a)) != (forked[0], forked[1]):
        assert time.monotonic() < deadline, (seen, forked)
        time.sleep(0.02)


def test_pools_answers_as_the_fork_does_and_follows_etcd(dac):
    _, env, a, scratch = dac
    forked, answered = both(dac, "pools", [])
    assert forked == answered and forked[0] == 0
    file_says(a, forked)
    job = scratch / "job8.sh"
    job.write_text("#!/bin/sh\n#DW jobdw capacity=600MiB access_mode=striped\n")
    fn(env, "setup", "--token", "8", "--caller", "SLURM", "--user", "1000", "--groupid", "1000",
       "--capacity", "default:600MiB", "--job", str(job))  # fmt: skip
    try:
        changed, answered = both(dac, "pools", [])  # two more bricks claimed, at once
        assert changed == answered and changed != forked
        file_says(a, changed)  # and the file within PUBLISH_EVERY
    finally:
        fn(env, "teardown", "--token", "8", "--job", str(job))
    forked, answered = both(dac, "pools", [])
    assert forked == answered
    file_says(a, forked)


def paths_file_says(a: Answerer, token: str, text: bytes | None, timeout: float = 3.0) -> None:
    """The answerer's paths file of job `token` (dacservice/answerer/published.py) comes to hold
    `text` (None: comes to be absent), within PUBLISH_EVERY of the mirror."""
    path = a.path.parent / "paths" / token
    deadline = time.monotonic() + timeout
    while True:
        seen = path.read_bytes() if path.exists() else None
        want = None if text is None else b"dac-paths/1 %d\n" % len(text) + text
        if seen == want:
            return
        assert time.monotonic() < deadline, (seen, want)
        time.sleep(0.02)


def _paths(dac, token: str, script: Path, *more: str):
    workdir = dac[0]
    files = [workdir.parent / f"pathfile.{token}.{n}" for n in ("fork", "answer")]
    forked = as_process(
        ["--function", "paths", "--token", token, "--job", str(script), "--pathfile",
         str(files[0]), *more], dac[1])  # fmt: skip
    reply = ask(
        str(dac[2].path),
        "paths",
        ["--token", token, "--job", str(script), "--pathfile", str(files[1]), *more],
    )
    assert reply[0] == "ANSWER", reply
    texts = [f.read_bytes() if f.exists() else None for f in files]
    # burst_buffer.lua's way (reply:pathfile): the lines in the reply, for it to write; the
    # answerer touches no file
    files.append(workdir.parent / f"pathfile.{token}.replied")
    lines = ask(
        str(dac[2].path),
        "paths",
        ["--token", token, "--job", str(script), "--pathfile", str(files[2]), *more],
        pathfile_reply=True,
    )
    assert not files[2].exists()
    if reply[1] == 0:
        assert texts[1] is not None and lines == ("ANSWER", 0, texts[1].decode(), reply[3])
    else:
        assert lines == reply, lines
    return (forked, texts[0]), (reply[1:], texts[1])


def test_paths_answers_as_the_fork_does(dac):
    workdir, env, a, scratch = dac
    persistent = scratch / "p.sh"
    persistent.write_text("#!/bin/sh\n#DW persistentdw name=proj1\n")
    before = a.stats().get("paths:mirror", 0)
    forked, answered = _paths(dac, "7", scratch / "job7.sh")
    assert forked == answered and forked[0][0] == 0
    assert forked[1].startswith(
        f"DW_JOB_STRIPED={workdir}/mnt/7/striped\nDW_JOB_PRIVATE={workdir}/mnt/7/private\n"
        "DW_PERSISTENT_STRIPED_proj1=".encode()
    )
    assert a.stats()["paths:mirror"] == before + 2  # written, and replied
    paths_file_says(a, "7", forked[1])  # what burst_buffer.lua reads at the job's start
    # no buffer for job 21: its persistentdw names from the script, read from etcd to be sure
    assert _paths(dac, "21", persistent)[0] == _paths(dac, "21", persistent)[1]
    paths_file_says(a, "21", None)  # its lines are in its script: asked, never a file
    for bad in (["--array-job", "x"], ["--array-job", "5"]):
        forked, answered = _paths(dac, "22", scratch / "absent.sh", *bad)
        assert forked == answered
    forked, answered = _paths(dac, "not-a-job", persistent)
    assert forked == answered and forked[0][0] == 1


def test_paths_of_a_buffer_made_a_moment_ago_is_that_buffers(dac):
    workdir, env, a, scratch = dac
    job = scratch / "job9.sh"
    job.write_text("#!/bin/sh\n#DW jobdw capacity=100MiB access_mode=private\n")
    fn(env, "setup", "--token", "9", "--caller", "SLURM", "--user", "1000", "--groupid", "1000",
       "--capacity", "default:100MiB", "--job", str(job))  # fmt: skip
    try:
        forked, answered = _paths(dac, "9", job)
        assert forked == answered
        assert answered[1] == f"DW_JOB_PRIVATE={workdir}/mnt/9/private\n".encode()
        paths_file_says(a, "9", answered[1])
    finally:
        fn(env, "teardown", "--token", "9", "--job", str(job))
    paths_file_says(a, "9", None)  # gone with its buffer


def test_a_config_change_is_answered_without_a_restart(dac):
    workdir, env, a, scratch = dac
    config = Path(env["DAC_CONFIG"])
    text = config.read_text()
    assert f"mount_root: {workdir}/mnt" in text
    try:
        config.write_text(text.replace(f"mount_root: {workdir}/mnt", "mount_root: /elsewhere"))
        forked, answered = _paths(dac, "7", scratch / "job7.sh")
        assert forked == answered
        assert answered[1].startswith(b"DW_JOB_STRIPED=/elsewhere/7/striped\n")
        paths_file_says(a, "7", answered[1])
    finally:
        config.write_text(text)
    again = _paths(dac, "7", scratch / "job7.sh")[1][1]
    assert again.startswith(f"DW_JOB_STRIPED={workdir}".encode())
    paths_file_says(a, "7", again)


def test_etcd_out_of_reach_is_refused_within_the_bound_then_answered_again(dac):
    workdir, env, a, scratch = dac
    state = json.loads((workdir / "state.json").read_text())
    members = state["etcd"].get("members") or [state["etcd"]]
    pids = [m["pid"] for m in members]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)  # etcd answers nothing, and closes nothing
    try:
        time.sleep(0.7)  # past FRESH_FOR: the mirror is no longer confirmed current
        assert pools_file(a) is None  # so its pools file is gone: the hook asks, and forks
        for function, args in (("pools", []), ("job_process", ["--job", str(scratch / "job7.sh")])):
            started = time.monotonic()
            reply = ask(str(a.path), function, args)
            took = time.monotonic() - started
            assert reply[0] == "REFUSE", reply
            assert "not confirmed current" in reply[1] and "etcd" in reply[1]
            assert took < 0.5  # burst_buffer.lua waits 0.5 s, then forks with what is left
        for words in ([], ["7"]):  # bbstat too: dac-bbstat forked says it in its one line
            started = time.monotonic()
            reply = ask(str(a.path), "bbstat", words, caller="")
            assert reply[0] == "REFUSE" and "etcd" in reply[1], reply
            assert time.monotonic() - started < 0.5
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    a.wait_fresh()
    forked, answered = both(dac, "pools", [])
    assert forked == answered and forked[0] == 0
    file_says(a, forked)


def test_a_script_rewritten_in_place_is_answered_for_what_it_now_says(dac):
    """The parse kept per script content (daccore/services/slurm_functions.py): the same path
    rewritten with each case in turn, twice round (the second from the kept parses), answered
    as the fork answers each."""
    workdir, _, a, scratch = dac
    path = scratch / "rewritten.sh"
    differ = []
    for _ in range(2):
        for case in CASES:
            path.write_bytes(case.format(home=workdir.parent).encode())
            forked, answered = both(
                dac, "job_process", ["--job", str(path), "--user", "1000"], carried=True
            )
            if forked != answered:
                differ.append((case, forked, answered))
    assert differ == []


@pytest.mark.parametrize(
    "words",
    [
        ["--job", "{job}", "--user", "1000"],
        ["-j", "{job}", "-u", "1000", "--debug"],
        ["--jo", "{job}"],  # abbreviated: argparse's
        ["--job={job}", "--user=1000"],
        ["--job", "{job}", "--user", "root"],
        ["--job", "{job}", "--user", "-1"],
        ["--job", "{job}", "stray"],
        ["--job", "{job}", "--nosuch", "1"],
        ["--job"],
    ],
    ids=lambda w: " ".join(w),
)
def test_job_process_words_parsed_as_the_fork_parses_them(dac, words):
    """The answerer's parse of Slurm's words without argparse (dacctl/commands.py
    `_function_words`), and argparse's where it gives way: the same answer, a refusal's
    one line included."""
    job = dac[3] / "job7.sh"
    forked, answered = both(dac, "job_process", [w.format(job=job) for w in words])
    assert forked == answered


def test_a_carried_script_is_job_processs_alone_whole_and_bounded(dac):
    """`script:<n>` (the answerer's wire.py): job_process only, at most MAX_SCRIPT bytes,
    all of them; else REFUSE, which burst_buffer.lua answers by forking dacctl."""
    _, _, a, _ = dac
    job = str(dac[3] / "job7.sh")
    assert raw_request(a.path, b"dac-answer/2 pools script:3\nabc").startswith(
        b"REFUSE only job_process"
    )
    too_big = b"dac-answer/2 job_process script:%d --job %s\n" % (MAX_SCRIPT + 1, job.encode())
    assert raw_request(a.path, too_big).startswith(
        b"REFUSE only job_process carries a script, of at most"
    )
    short = b"dac-answer/2 job_process script:100 --job %s\n#!/bin/sh\n" % job.encode()
    assert raw_request(a.path, short, shut=True) == b"REFUSE a job script cut short\n"
    # under /1 no word is taken for a script: dacctl's own refusal of a stray word, as the
    # fork's for the same words
    reply = raw_request(
        a.path, b"dac-answer/1 job_process script:3 --job %s\nabc" % job.encode(), shut=True
    )
    forked = as_process(["--function", "job_process", "script:3", "--job", job], dac[1])
    assert reply.startswith(b"ANSWER 1 ") and forked[0] == 1
    assert reply.split(b"\n", 1)[1].decode() == forked[1] + forked[2]
    whole = b"#!/bin/sh\n#DW jobdw capacity=100MiB access_mode=striped\n"
    line = b"dac-answer/2 job_process script:%d --job /nonexistent/x\n" % len(whole)
    assert (
        raw_request(a.path, line + whole) == b"ANSWER 0 0\n"
    )  # built from the bytes: no file opened


def bbstat_forked(env: dict, words: list[str], caller: str) -> str:
    """What `dac-bbstat <words>` prints, as slurmctld's hooks run it with DAC_BBSTAT_CALLER."""
    r = subprocess.run(
        [str(BIN / "dac-bbstat"), *words],
        capture_output=True,
        env={**os.environ, **env, "DAC_BBSTAT_CALLER": caller},
        timeout=60,
    )
    assert (r.returncode, r.stderr) == (0, b""), r.stderr
    return r.stdout.decode("utf-8", "surrogateescape")


def test_bbstat_answers_what_dac_bbstat_prints_for_every_caller(dac):
    """`scontrol show bbstat` / `dwstat` through the answerer (issue 45): byte for byte what
    dac-bbstat prints, for every view and job word and every caller: none named (22.05,
    datawarp), the buffer's owner, another user, root, a member of admin_group, a caller word
    that is not one; the owner, root and admin see a failed stage-in's error text, no one else."""
    workdir, env, a, scratch = dac
    secret = workdir.parent / "bbstat-secret-dir"  # never made: the stage-in fails naming it
    job = scratch / "job31.sh"
    job.write_text(
        "#!/bin/sh\n#DW jobdw capacity=100MiB access_mode=striped\n"
        f"#DW stage_in type=file source={secret}/plans.txt destination=$DW_JOB_STRIPED/p\n"
    )
    fn(env, "setup", "--token", "31", "--caller", "SLURM", "--user", "1000", "--groupid", "1000",
       "--capacity", "default:100MiB", "--job", str(job))  # fmt: skip
    config = Path(env["DAC_CONFIG"])
    text = config.read_text()
    try:
        rc, out, _ = as_process(["--function", "data_in", "--token", "31", "--job", str(job)], env)
        assert rc == 1 and str(secret) in out, out
        config.write_text(text + "admin_group: adm\n")  # gid 4 on Debian
        before = a.stats()
        words_tried = [[], *([v] for v in ("pools", "sessions", "instances", "configurations",
                       "activations", "7", "31", "999", "hosts", "", "0")),
                       ["31", "pools"], ["--function", "pools"]]  # fmt: skip
        callers = {"none": "", "owner": "1000:1000", "other": "1001:1001", "root": "0:0",
                   "admin": "1002:4", "not one": "1000"}  # fmt: skip
        differ, lines = [], {}
        for words in words_tried:
            for who, caller in callers.items():
                forked = bbstat_forked(env, words, caller)
                answered = ask(str(a.path), "bbstat", words, caller=caller)
                if answered != ("ANSWER", 0, forked, ""):
                    differ.append((words, who, forked, answered))
                if words == ["31"]:
                    lines[who] = forked
        assert differ == []
        for who in ("owner", "root", "admin"):
            assert str(secret) in lines[who], (who, lines[who])
        for who in ("none", "other", "not one"):
            assert str(secret) not in lines[who] and "failed (its owner sees why" in lines[who]
        after = a.stats()
        answered = sum(after.get(f"bbstat:{s}", 0) - before.get(f"bbstat:{s}", 0)
                       for s in ("mirror", "etcd"))  # fmt: skip
        assert answered == len(words_tried) * len(callers), (before, after)
        assert after.get("bbstat:refused", 0) == before.get("bbstat:refused", 0)
        # the pools and a refused word from memory; a job's statuses from etcd
        assert after["bbstat:mirror"] - before.get("bbstat:mirror", 0) >= 5 * len(callers)
    finally:
        config.write_text(text)
        fn(env, "teardown", "--token", "31", "--job", str(job), "--hurry")
