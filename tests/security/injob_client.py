"""The user service's client as users of a local DAC run it: the interpreter and import paths
of the DAC's user launcher (DIR/bin/dacctl, daclocal/userbin.py), with a program that sends
one request (daccore.services.user_client.ask) and prints the reply as JSON. Jobs run it on
their node; tests run it as another user on the same machine.

    <client> VERB key=value ...      ids=1,2 is a list, id and timeout ints, true/false a bool
"""

import json
import shlex
from pathlib import Path

BOOT = """
import json, os, site, sys
n = int(sys.argv[1]); dirs = sys.argv[2:2 + n]
sys.path.insert(0, dirs[0]); [site.addsitedir(d) for d in dirs[1:]]
from daccore.errors import DacError
from daccore.services.user_client import ask
from daccore.settings.config import load_config
verb, args = sys.argv[2 + n], {}
for word in sys.argv[3 + n:]:
    k, _, v = word.partition("=")
    if k == "ids":
        v = [int(x) for x in v.split(",")]
    elif k in ("id", "timeout"):
        v = int(v)
    elif v in ("true", "false"):
        v = v == "true"
    args[k] = v
try:
    print(json.dumps({"ok": ask(load_config(os.environ["DAC_CONFIG"]), verb, args)}))
except DacError as e:
    print(json.dumps({"error": str(e), "kind": e.kind.value}))
    sys.exit(1)
"""


def client_argv(workdir: Path) -> list[str]:
    """The argv that runs the client with the launcher's interpreter and import paths."""
    line = (workdir / "bin" / "dacctl").read_text().strip().splitlines()[-1]
    words = shlex.split(line)  # exec PYTHON -I -S -c BOOT N DIR... "$@"
    python, n = words[1], int(words[6])
    return [python, "-I", "-S", "-c", BOOT, str(n), *words[7 : 7 + n]]


def shell(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def reply(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])
