"""libdacstage (the C library of in-job stages) built with the system cc from the sources the
package ships, against a stand-in dacctl: the argv each call runs, the answers it reads, the
return codes and messages of each failure."""

import subprocess
from pathlib import Path

import pytest

from daccore.share import asset

DRIVER = r"""
#include <stdio.h>
#include <string.h>
#include "dacstage.h"
int main(int argc, char **argv) {
    dacstage_info info;
    int id = -1, rc;
    dacstage_init(argv[1]);
    if (!strcmp(argv[2], "out")) {
        rc = dacstage_out("/b/ckpt", "/home/u/ckpt", DACSTAGE_AT_JOB_END | DACSTAGE_REVOCABLE, &id);
        printf("%d %d [%s]\n", rc, id, dacstage_errmsg());
    } else if (!strcmp(argv[2], "query")) {
        memset(&info, 0, sizeof info);
        rc = dacstage_query(3, &info);
        printf("%d %d %s %lld/%lld %lld/%lld %lld %.1f [%s] [%s]\n", rc, info.id, info.state,
               info.bytes_done, info.bytes_total, info.files_done, info.files_total, info.rate,
               info.eta, info.error, dacstage_errmsg());
    } else if (!strcmp(argv[2], "wait")) {
        memset(&info, 0, sizeof info);
        rc = dacstage_wait(0, 5, &info);
        printf("%d %d %s [%s] [%s]\n", rc, info.id, info.state, info.error, dacstage_errmsg());
    } else if (!strcmp(argv[2], "bad")) {
        printf("%d [%s]\n", dacstage_in(NULL, "/x", 0, &id), dacstage_errmsg());
        printf("%d [%s]\n", dacstage_out("/a", "/b", 64, &id), dacstage_errmsg());
        printf("%d [%s]\n", dacstage_cancel(0), dacstage_errmsg());
    }
    return 0;
}
"""

STATUS = (
    '{"id": 3, "job": "7", "state": "running", "bytes_done": 1048576, "bytes_total": 4194304, '
    '"files_done": 0, "files_total": 1, "rate": 524288, "eta": 6.0, "error": null, '
    '"source": "/b/{x}\\"y", "destination": "/d"}'
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The library from the installed sources (with its own Makefile), and the driver."""
    src = asset("libdacstage", directory=True)
    out = tmp_path_factory.mktemp("libdacstage")
    r = subprocess.run(["make", "-C", str(src), f"OUT={out}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (out / "libdacstage.so").exists() and (out / "checkpoint").exists()
    (out / "driver.c").write_text(DRIVER)
    r = subprocess.run(
        [
            "cc",
            "-Wall",
            "-Werror",
            f"-I{src}",
            str(out / "driver.c"),
            str(out / "libdacstage.a"),
            "-o",
            str(out / "driver"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return out


def _fake(tmp_path: Path, rc: int, stdout: str, stderr: str = "") -> Path:
    """A dacctl that records its argv and answers with `stdout`, `stderr` and `rc`."""
    (tmp_path / "out").write_text(stdout)
    (tmp_path / "err").write_text(stderr)
    script = tmp_path / "dacctl"
    script.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv\ncat {tmp_path}/out\n'
        f"cat {tmp_path}/err >&2\nexit {rc}\n"
    )
    script.chmod(0o755)
    return script


def _drive(built, fake, what):
    r = subprocess.run([str(built / "driver"), str(fake), what], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip(), (fake.parent / "argv").read_text().split("\n")[:-1]


def test_a_stage_out_runs_dacctl_with_its_flags_and_reads_the_id(built, tmp_path):
    out, argv = _drive(built, _fake(tmp_path, 0, '{\n  "id": 12,\n  "state": "queued"\n}\n'), "out")
    assert out == "0 12 []"
    assert argv == [
        "stage",
        "out",
        "/b/ckpt",
        "/home/u/ckpt",
        "--json",
        "--at-job-end",
        "--revocable",
    ]


def test_query_fills_every_field_of_the_answer(built, tmp_path):
    out, argv = _drive(built, _fake(tmp_path, 0, STATUS), "query")
    assert out == "0 3 running 1048576/4194304 0/1 524288 6.0 [] []"
    assert argv == ["stage", "status", "3", "--json"]


def test_a_refusal_is_its_kind_and_dacctls_one_line(built, tmp_path):
    fake = _fake(tmp_path, 1, "", "dacctl: user error: no running job 7 of yours on node n1\n")
    out, _ = _drive(built, fake, "query")
    assert out.endswith("[] [no running job 7 of yours on node n1]") and out.startswith("1 ")
    fake = _fake(tmp_path, 2, "", "dacctl: admin error: dac's user service is unreachable\n")
    assert _drive(built, fake, "out")[0] == "2 -1 [dac's user service is unreachable]"
    out, _ = _drive(built, tmp_path / "no-such-dacctl", "out")
    assert out.startswith("4 -1 [could not run ")


def test_wait_names_the_stage_that_failed(built, tmp_path):
    stages = (
        '[\n{"id": 1, "state": "done", "error": null},\n'
        '{"id": 2, "state": "failed", "error": "stage out failed: /d: Permission denied"}\n]\n'
    )
    fake = _fake(tmp_path, 1, stages, "dacctl: user error: stage 2 failed: /d: Permission denied\n")
    out, argv = _drive(built, fake, "wait")
    assert out == (
        "5 2 failed [stage out failed: /d: Permission denied] "
        "[stage 2 failed: /d: Permission denied]"
    )
    assert argv == ["stage", "wait", "--json", "--all", "--timeout", "5"]
    fake = _fake(tmp_path, 1, '[{"id": 1, "state": "running"}]', "dacctl: user error: not all\n")
    assert _drive(built, fake, "wait")[0].startswith("6 1 running")
    assert _drive(built, _fake(tmp_path, 0, '[{"id": 1, "state": "done"}]'), "wait")[0] == (
        "0 1 done [] []"
    )


def test_bad_arguments_are_refused_without_running_anything(built, tmp_path):
    fake = _fake(tmp_path, 0, "")
    r = subprocess.run([str(built / "driver"), str(fake), "bad"], capture_output=True, text=True)
    assert r.stdout.splitlines() == [
        "7 [dacstage_in: a source, a destination and known flags]",
        "7 [dacstage_out: a source, a destination and known flags]",
        "7 [dacstage_cancel: a stage id]",
    ]
    assert not (tmp_path / "argv").exists()
