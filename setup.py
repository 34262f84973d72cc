"""The wheel's packages, found rather than listed, so a new subpackage is never left out:
every package under the dac* folders, and the design's top-level folders that pyproject.toml's
[tool.setuptools.package-dir] maps below daccore.share (a mapped folder is out of reach of
find_packages). Everything else about the build lives in pyproject.toml."""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
MAPPED = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]

setup(packages=find_packages(where=str(HERE), include=["dac*"]) + sorted(MAPPED))
