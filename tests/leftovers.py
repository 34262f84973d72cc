"""Processes a job's user leaves behind, for the teardown tests of every backend
(tests/security/test_teardown_holders.py, tests/system/test_site_backends_dacd.py), and the
named accounts the DAOS tests need (DAOS names pool owners)."""

import pwd
import subprocess

#: Run as a job's user: detaches (setsid, then a double fork) and prints its own pid, then runs
#: the shape named by argv[1] on the path argv[2]; a holder takes its cwd there before the pid
#: is printed, so it holds the buffer once its pid is known.
LEFTOVER = r"""
import os, signal, sys, time
os.setsid()
if os.fork():
    os._exit(0)
if os.fork():
    os._exit(0)
shape, path = sys.argv[1], sys.argv[2]
if shape == "holder":
    os.chdir(path)
print(os.getpid(), flush=True)
os.close(1)
if shape == "bystander":  # holds nothing; notes each SIGCONT (it was stopped) in the file path
    def noted(*_):
        with open(path, "a") as f:
            f.write("continued\n")
    signal.signal(signal.SIGCONT, noted)
    while True:
        time.sleep(1000)
if shape == "holder":  # its cwd in the buffer
    time.sleep(1000)
os.chdir("/")  # the spawner holds nothing itself
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
while True:  # short children that cd into the buffer, for ever
    if os.fork() == 0:
        try:
            os.chdir(path)
            time.sleep(0.05)
        finally:
            os._exit(0)
    time.sleep(0.01)
"""


def account(name: str) -> pwd.struct_passwd:
    """The account `name`, made (no home) when the machine has none."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", name], check=True)
        return pwd.getpwnam(name)
