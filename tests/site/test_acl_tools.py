"""The setfacl stand-in run as a real subprocess from bin/, as the playbooks run it: every
case below is what acl 2.3.1's setfacl (Debian 12's) printed, exited with and left on the
files, recorded by running it; where that setfacl is installed, each case is run through both
and must agree. The ACLs are real (the system.posix_acl_access attribute), so the kernel
decides who passes: the playbooks' ACL lets its user alone pass, as that user and another
find out. What the site does not model is refused, and changes nothing."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from recorded_site import reach
from security.staging_dac import GID, OTHER_GID, OTHER_UID, UID

from daccore.backends.lustre import passable_to

sys.path.insert(0, str(Path(__file__).resolve().parent))
from acl_tools import access_acl  # noqa: E402  (tests/site, as bin/standin finds it)

BIN = Path(__file__).resolve().parent / "bin"
REAL = Path("/usr/bin/setfacl")
USAGE = (
    "Usage: setfacl [-bkndRLP] { -m|-M|-x|-X ... } file ...\n"
    "Try `setfacl --help' for more information."
)
#: the files each case starts from: name -> (mode, access ACL)
BEFORE = {"D": ("0o700", None), "E": ("0o750", None), "F": ("0o640", None)}
CLOSED = ("0o710", "u::rwx,u:1234:--x,g::---,m::--x,o::---")
#: (argv, exit status, stderr, the files changed: name -> (mode, ACL)[, stdout])
CASES: list[tuple] = [
    # the playbooks' form (daccore.backends.lustre.passable_to), over several directories
    (["--set", "u::rwx,u:1234:--x,g::---,o::---", "D", "E"], 0, "", {"D": CLOSED, "E": CLOSED}),
    (["--set=u::rwx,u:1234:x,g::-,o::-", "D"], 0, "", {"D": CLOSED}),
    (
        ["--set", "u:1234:x", "D"],
        1,
        "setfacl: D: Malformed access ACL `user:1234:--x,mask::--x': Missing or wrong entry at "
        "entry 1",
        {},
    ),
    # 2.3.1 exits with the last file's status
    (
        ["-m", "u:1234:x", "nothere", "D"],
        0,
        "setfacl: nothere: No such file or directory",
        {"D": CLOSED},
    ),
    (
        ["-m", "u:1234:x", "D", "nothere"],
        1,
        "setfacl: nothere: No such file or directory",
        {"D": CLOSED},
    ),
    (["-m", "u:nosuchuser:x", "D"], 2, "setfacl: Option -m: Invalid argument near character 3", {}),
    (["-m", "u:1234", "D"], 2, "setfacl: Option -m incomplete", {}),
    (["-x", "u:1234:x", "D"], 2, "setfacl: Option -x: Invalid argument near character 8", {}),
    (["-m", "u:1234:rwxr", "D"], 2, "setfacl: Option -m: Invalid argument near character 11", {}),
    (["-m", "u:1234:07", "D"], 0, "", {"D": ("0o770", "u::rwx,u:1234:rwx,g::---,m::rwx,o::---")}),
    (["-m", "u:-2:x", "D"], 0, "", {"D": ("0o710", "u::rwx,u:65534:--x,g::---,m::--x,o::---")}),
    (
        ["-m", "u:0x10:x,g:010:r", "D"],
        0,
        "",
        {"D": ("0o750", "u::rwx,u:16:--x,g::---,g:8:r--,m::r-x,o::---")},
    ),
    (["-m", "1234:x", "D"], 0, "", {"D": CLOSED}),
    (["-m", "other::r,mask:rwx", "D"], 0, "", {"D": ("0o774", "u::rwx,g::---,m::rwx,o::r--")}),
    (
        ["-n", "-m", "u:77:rwx", "D"],
        0,
        "",
        {"D": ("0o700", "u::rwx,u:77:rwx,g::---,m::---,o::---")},
    ),
    (
        ["--mask", "-m", "u:77:rwx,m::r", "D"],
        0,
        "",
        {"D": ("0o770", "u::rwx,u:77:rwx,g::---,m::rwx,o::---")},
    ),
    (["-m", "u:77:rwx,m::r", "D"], 0, "", {"D": ("0o740", "u::rwx,u:77:rwx,g::---,m::r--,o::---")}),
    # files and options in order: an option after a file starts a new list
    (
        ["-m", "u:1:x", "D", "-m", "u:2:x", "E"],
        0,
        "",
        {
            "D": ("0o710", "u::rwx,u:1:--x,g::---,m::--x,o::---"),
            "E": ("0o750", "u::rwx,u:2:--x,g::r-x,m::r-x,o::---"),
        },
    ),
    (["-m", "u:1:x", "D", "-n"], 2, USAGE, {"D": ("0o710", "u::rwx,u:1:--x,g::---,m::--x,o::---")}),
    (["-m", "u:9:X", "F"], 0, "", {"F": ("0o640", "u::rw-,u:9:---,g::r--,m::r--,o::---")}),
    (
        ["--set", "u::rwx,u:5:x,g::r,o::-,u:5:r", "D"],
        0,
        "",
        {"D": ("0o740", "u::rwx,u:5:r--,g::r--,m::r--,o::---")},
    ),
    (
        ["-m", "u:4294967295:x", "D"],
        1,
        "setfacl: D: Malformed access ACL `user::rwx,group::---,mask::--x,other::---,"
        "user:4294967295:--x': Missing or wrong entry at entry 5",
        {},
    ),
    (["-m", "u:5:x", "--", "D"], 0, "", {"D": ("0o710", "u::rwx,u:5:--x,g::---,m::--x,o::---")}),
    (["--bogus", "D"], 2, USAGE, {}),
    (["D"], 2, USAGE, {}),
    (["-m", "u:5:x"], 2, USAGE, {}),
    (["-v"], 0, "", {}, "setfacl 2.3.1"),
]


@pytest.fixture
def work():
    """A site and the files the cases work on, in a tree every user may enter (pytest's
    tmp_path is root's alone): a refusal another uid meets is the ACL's, not the tree's."""
    root = Path(tempfile.mkdtemp(prefix="dac-acl-site-"))
    root.chmod(0o755)
    site = root / "site"
    site.mkdir()
    (site / "site.json").write_text(json.dumps({"hosts": {"node1": {}}}))
    for name, text in (("state.json", "{}"), ("state.lock", ""), ("commands.jsonl", "")):
        (site / name).write_text(text)
    files = root / "w"
    files.mkdir()
    yield files
    shutil.rmtree(root, ignore_errors=True)


def fresh(files: Path) -> None:
    for name in BEFORE:
        path = files / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    (files / "D").mkdir(0o700)
    (files / "E").mkdir(0o750)
    (files / "F").touch(0o640)
    for name, (mode, _) in BEFORE.items():
        (files / name).chmod(int(mode, 8))


def state(files: Path) -> dict:
    return {
        n: (oct((files / n).stat().st_mode & 0o7777), access_acl(str(files / n))) for n in BEFORE
    }


def run(tool: Path, files: Path, argv: list[str]) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ["PATH"],
        "DAC_SITE_DIR": str(files.parent / "site"),
        "DAC_SITE_HOST": "node1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return subprocess.run(
        [str(tool), *argv], cwd=files, env=env, capture_output=True, text=True, timeout=20
    )


def calls(files: Path) -> list[dict]:
    text = (files.parent / "site" / "commands.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(c[0]) or "-")
def test_setfacl_says_exits_and_leaves_what_setfacl_2_3_1_does(work, case):
    argv, rc, stderr, changed, *printed = case
    fresh(work)
    out = run(BIN / "setfacl", work, argv)
    stdout = printed[0] if printed else ""
    assert (out.returncode, out.stderr.strip(), out.stdout.strip()) == (rc, stderr, stdout)
    assert state(work) == {**BEFORE, **changed}
    (call,) = calls(work)  # recorded, accepted or not
    assert (call["argv"], call["rc"], call["host"]) == (["setfacl", *argv], rc, "node1")


def test_the_real_setfacl_agrees_with_the_stand_in_on_every_case(work):
    for argv, *_ in CASES:
        seen = []
        for tool in (REAL, BIN / "setfacl"):
            fresh(work)
            out = run(tool, work, argv)
            seen.append((out.returncode, out.stderr.strip(), out.stdout.strip(), state(work)))
        assert seen[0] == seen[1], argv


@pytest.mark.parametrize(
    "argv,refusal",
    [
        (["-R", "-m", "u:5:x", "D"], "-R"),
        (["-P", "-m", "u:5:x", "D"], "-P"),
        (["-d", "-m", "u:5:x", "D"], "default ACLs (-d)"),
        (["-m", "d:u:5:x", "D"], "default ACLs (d: entries)"),
        (["-k", "D"], "default ACLs (-k)"),
        (["-b", "D"], "-b (it removes the default ACL too)"),
        (["-M", "acl.txt", "D"], "-M"),
        (["--set-file=acl.txt", "D"], "--set-file"),
        (["--restore=acl.txt"], "--restore"),
        (["--test", "-m", "u:5:x", "D"], "--test"),
        (["-m", "u:5:x", "-"], "file names on standard input (-)"),
        # refused as a whole: the file before the unmodelled option is not set either
        (["-m", "u:5:x", "D", "-R", "-m", "u:6:x", "E"], "-R"),
    ],
)
def test_what_the_site_does_not_model_is_refused_and_changes_nothing(work, argv, refusal):
    fresh(work)
    out = run(BIN / "setfacl", work, argv)
    said = f"setfacl: this site does not model {refusal}"
    assert (out.returncode, out.stderr.strip()) == (2, said)
    assert state(work) == BEFORE


def test_the_playbooks_acl_lets_the_owner_alone_pass(work):
    """The kernel's own check of the ACL the playbooks set: below a directory closed with
    passable_to(1234), uid 1234 opens and measures what is there, uid 5678 gets EACCES; the
    directory stays root's, and its owner may pass it but not list it."""
    job = work / "7"
    job.mkdir(0o700)
    (job / "striped").mkdir()
    out = run(BIN / "setfacl", work, ["--set", passable_to(UID), "7"])
    assert out.returncode == 0, out.stderr
    assert (job.stat().st_uid, access_acl(str(job))) == (0, CLOSED[1])
    mount = job / "striped"
    assert (reach(mount, UID, GID), reach(mount, OTHER_UID, OTHER_GID)) == ("ok", "EACCES")
    listed = subprocess.run(
        ["ls", str(job)], user=UID, group=GID, extra_groups=[], capture_output=True, text=True
    )
    assert listed.returncode != 0 and "Permission denied" in listed.stderr
