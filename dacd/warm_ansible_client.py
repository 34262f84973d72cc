#!python3 -IS   (WarmAnsible writes this line with dacd's interpreter when it installs the client)
"""`ansible-playbook` for ansible-runner (its `binary`): hands this run to dacd's warm Ansible
server (dacd/warm_ansible.py) at $DAC_WARM_ANSIBLE and exits with the run's exit code; runs the
real ansible-playbook itself when no server answers. Standard library only, started with -IS:
it is on every step's path and must cost milliseconds."""

import array
import json
import os
import socket
import struct
import sys


def main() -> int:
    argv = ["ansible-playbook", *sys.argv[1:]]
    path = os.environ.get("DAC_WARM_ANSIBLE", "")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        conn.sendmsg(
            [struct.pack("!I", len(body))],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))],
        )
        conn.sendall(body)
        replies = conn.makefile("r")
        first = replies.readline().split(" ", 1)
    except OSError:
        first = [""]
    if first[0] != "pid":  # no server, or it refused: the cold path, same behaviour
        conn.close()
        os.execvp("ansible-playbook", argv)
    # from here the run is the server's child; if we are killed, it sees our end close and stops
    last = replies.readline().split()
    if len(last) != 2 or last[0] != "rc":
        return 1
    rc = int(last[1])
    return 128 - rc if rc < 0 else rc  # killed by signal N: 128+N, as a shell reports it


if __name__ == "__main__":
    sys.exit(main())
