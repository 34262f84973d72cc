"""What a site installs besides the Python package: the systemd unit and the sample config."""

import os
import subprocess
import sys
import tomllib
from importlib.metadata import distribution
from pathlib import Path

import pytest

import daccore
from daccore.errors import InternalError
from daccore.share import asset

PACKAGING = asset("packaging", directory=True)


def test_the_systemd_unit_verifies_with_systemd(tmp_path):
    # systemd-analyze checks the unit's syntax and that ExecStart runs: point it at this dacd
    unit = (
        (PACKAGING / "dacd.service")
        .read_text()
        .replace("/opt/dac/venv/bin/dacd", str(Path(sys.executable).parent / "dacd"))
    )
    path = tmp_path / "dacd.service"
    path.write_text(unit)
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
    assert "KillSignal=SIGTERM" in unit and "--config /etc/dac/dac.yaml" in unit


def test_dacd_refuses_the_sample_config_only_for_what_this_machine_lacks(tmp_path):
    # the sample is valid: dacd gets as far as looking for its host entry
    r = subprocess.run(
        [
            str(Path(sys.executable).parent / "dacd"),
            "--config",
            str(PACKAGING / "dac.yaml"),
            "--host",
            "nosuchhost",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().endswith(
        "hosts.nosuchhost: this host is not in the config (hosts: dac1); pass --host or add it"
    )


def test_a_missing_asset_is_an_internal_error_naming_it():
    with pytest.raises(
        InternalError,
        match=r"^dac's playbooks/nfs is missing "
        r"from this installation; reinstall dac$",
    ):
        asset("playbooks", "nfs", directory=True)
    with pytest.raises(InternalError, match="slurm-plugin/burst_buffer.lua.orig is missing"):
        asset("slurm", "burst_buffer.lua.orig")


def test_a_missing_playbook_never_counts_as_success(tmp_path, monkeypatch):
    from dacd import runner

    (tmp_path / "playbooks" / "local").mkdir(parents=True)
    monkeypatch.setattr(runner, "playbooks", lambda: tmp_path / "playbooks")
    with pytest.raises(InternalError, match=r"^playbook local/create.yml is missing from "):
        runner.run_step("local", "create", "h1", {})


def test_the_installed_playbooks_have_every_step():
    from dacd.runner import playbooks

    for backend in ("local", "lustre", "daos"):
        for step in ("create", "mount", "unmount", "delete"):
            assert (playbooks() / backend / f"{step}.yml").is_file(), (backend, step)


def test_the_version_comes_from_one_place():
    from importlib.metadata import version

    import daccore

    r = subprocess.run(
        [str(Path(sys.executable).parent / "dacctl"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (r.returncode, r.stdout) == (0, f"dac, version {daccore.__version__}\n")
    assert version("dac") == daccore.__version__  # the installed metadata: pyproject reads it


def _checkout() -> Path:
    """The source tree this run was built from: scripts/test-installed exports it; a checkout's
    own run (make test-dev) is its parent."""
    root = Path(os.environ.get("DAC_CHECKOUT") or Path(__file__).resolve().parents[2])
    assert (root / "pyproject.toml").is_file(), f"no checkout at {root}: set DAC_CHECKOUT"
    return root


#: the design's top-level folders and the package each ships as (pyproject.toml's package-dir)
TOP_LEVEL = {
    "playbooks": "daccore/share/playbooks",
    "slurm-plugin": "daccore/share/slurm",
    "schema": "daccore/share/schema",
    "libdacstage": "daccore/share/libdacstage",
}


def test_the_top_level_folders_ship_whole_in_the_installed_package():
    root = _checkout()
    files = {str(f) for f in distribution("dac").files or ()}
    # else an editable install of the checkout (make test-dev)
    wheel = not Path(daccore.__file__).resolve().is_relative_to(root)
    for folder, package in TOP_LEVEL.items():
        tracked = subprocess.run(
            ["git", "-C", str(root), "ls-files", folder], text=True, capture_output=True, check=True
        ).stdout.split()
        assert tracked, folder
        found = asset(package.rsplit("/", 1)[1], directory=True)
        if wheel:
            missing = [p for p in tracked if package + p[len(folder) :] not in files]
            assert missing == [], f"{folder} files not in the wheel: {missing}"
            assert found.parts[-3:] == tuple(package.split("/")), found
        else:
            assert found == root / folder  # the asset lookup resolves through the mapped package


def test_every_package_in_the_checkout_ships_in_what_a_site_installs():
    """setup.py finds the packages (pyproject.toml keeps no list by hand): each package under
    the dac* folders and each mapped top-level folder is in the wheel (or, for an editable
    install, importable from the checkout)."""
    import importlib.util

    root = _checkout()
    assert (
        "packages" not in tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    )
    on_disk = {
        ".".join(p.parent.relative_to(root).parts)
        for top in ("daccore", "dacctl", "dacd", "dacservice", "daclocal")
        for p in (root / top).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    on_disk |= {package.replace("/", ".") for package in TOP_LEVEL.values()}
    assert {"daccore.store", "daccore.share.slurm", "dacservice"} <= on_disk
    if not Path(daccore.__file__).resolve().is_relative_to(root):  # the wheel
        files = {str(f) for f in distribution("dac").files or ()}
        shipped = {
            f[: -len("/__init__.py")].replace("/", ".") for f in files if f.endswith("/__init__.py")
        }
        assert on_disk - shipped == set(), "a package of the checkout is not in the wheel"
    else:
        assert [p for p in sorted(on_disk) if importlib.util.find_spec(p) is None] == []


def test_the_answerers_systemd_unit_verifies_and_names_the_socket_burst_buffer_lua_asks(tmp_path):
    unit = asset("packaging", "dac-answerer.service").read_text()
    lua = asset("slurm", "burst_buffer.lua").read_text()
    assert 'setting("DAC_ANSWERER_SOCKET", "/run/dac-answerer/socket")' in lua
    assert "--socket /run/dac-answerer/socket" in unit and "RuntimeDirectory=dac-answerer" in unit
    assert "RuntimeDirectoryMode=0700" in unit and "User=slurm" in unit
    local = unit.replace(
        "/opt/dac/venv/bin/dac-answerer", str(Path(sys.executable).parent / "dac-answerer")
    )
    path = tmp_path / "dac-answerer.service"
    path.write_text(local)
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
