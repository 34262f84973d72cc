"""Running dac's installed commands the way a user or Slurm would."""

import json
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def run(tool, *args, env=None, check=True, timeout=60):
    """Run an installed entry point (dacctl, dacd); raise with its stderr when check fails."""
    full_env = {**os.environ, **(env or {})}
    r = subprocess.run([str(BIN / tool), *args], capture_output=True, text=True, env=full_env,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{tool} {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def pools(env):
    """`dacctl pools --json`, by pool name."""
    out = run("dacctl", "pools", "--json", env=env).stdout
    return {p["name"]: p for p in json.loads(out)["pools"]}
