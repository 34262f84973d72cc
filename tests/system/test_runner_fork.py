"""A child forked for a playbook never goes on as a copy of dacd (issue 19).

ptyprocess forks, then sets the child's pty up in Python before its exec; an exception there
rises through the child's copy of dacd's stack. Seen in make test: dacd killed just after such a
fork closed the pty's master, the child (SIGHUP ignored, as under nohup) got EIO setting its
window size, and went on as a second dacd, writing "mount failed …: OSError: [Errno 5]" on the
killed dacd's still-valid lease: the waiting Slurm call failed instead of riding the restart
out. Here the same EIO is raised in the child only, deterministically."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import errno, os, sys
    import ptyprocess.ptyprocess as pp
    dacd = os.getpid()
    set_winsize = pp._setwinsize

    def eio_in_the_child(fd, rows, cols):
        if os.getpid() != dacd:  # the pty's master gone, as when dacd was just killed
            raise OSError(errno.EIO, "Input/output error")
        return set_winsize(fd, rows, cols)

    pp._setwinsize = eio_in_the_child
    from dacd.runner import run_step
    try:
        run_step("local", "mount", "h1", {})
        went_on = "returned"
    except BaseException as e:  # what dacd's reconciler would write as the step's status
        went_on = f"raised: {type(e).__name__}: {str(e)[:80]}"
    # a file, not stdout: a child's stdout is the pty
    with open("went-on", "a") as f:
        f.write(f"{os.getpid()} {went_on}\\n")
    print(dacd)
""")


def test_a_child_whose_setup_fails_before_its_exec_ends_there(tmp_path):
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    went_on = (tmp_path / "went-on").read_text().splitlines()
    # only dacd itself went on: the child ended in run_step, before any of dacd's code
    assert [line.split()[0] for line in went_on] == [r.stdout.strip()], went_on
    # and dacd saw the run fail as a playbook that could not start (exit 127), not an OSError
    assert "raised: PlaybookFailed" in went_on[0] and "rc 127" in went_on[0], went_on
