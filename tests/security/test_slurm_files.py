"""`dacctl slurm-files DIR` (docs/security.md, "Entry points"): anyone may run it, it writes
only the package's public files, only where its caller may write, and root never writes
through a link a user planted, in DIR or as DIR."""

import subprocess

import pytest
from clitools import run
from security.entry_helpers import ALICE, MALLORY, dacctl_as

from daccore.share import SLURM_EXECUTABLES, SLURM_FILES, asset

DECOY = b"root's own file\n"


def as_user(user, *argv):
    return subprocess.run(
        list(argv), check=True, user=user[0], group=user[1], extra_groups=[], cwd="/"
    )


def shipped(name: str) -> bytes:
    return asset("slurm", name).read_bytes()


@pytest.fixture
def sticky_dir(open_dir):
    """A directory every user may write, as /tmp is (sticky, 1777)."""
    open_dir.chmod(0o1777)
    return open_dir


@pytest.fixture
def decoy(tmp_path):
    """A root-owned file a user would like root to overwrite."""
    path = tmp_path / "decoy"
    path.write_bytes(DECOY)
    path.chmod(0o600)
    return path


def test_slurm_files_writes_the_installed_files(tmp_path):
    target = tmp_path / "etc-slurm"
    r = run("dacctl", "slurm-files", str(target))
    assert r.stdout.splitlines() == [f"{target / n}: written" for n in SLURM_FILES]
    for name in SLURM_FILES:
        assert (target / name).read_bytes() == shipped(name)
        mode = 0o755 if name in SLURM_EXECUTABLES else 0o644
        assert (target / name).stat().st_mode & 0o777 == mode
    # again: nothing to do; an edited file is kept unless --force
    r = run("dacctl", "slurm-files", str(target))
    assert r.stdout.splitlines() == [f"{target / n}: unchanged" for n in SLURM_FILES]
    (target / "burst_buffer.conf.lua").write_text("Directive=DW\n# edited by the site\n")
    r = run("dacctl", "slurm-files", str(target), check=False)
    assert (r.returncode, r.stderr.strip()) == (
        1,
        (
            f"dacctl: user error: slurm-files: {target}/burst_buffer.conf.lua exists and differs "
            "from this dac's; compare them, then run again with --force to replace it"
        ),
    )
    assert "edited by the site" in (target / "burst_buffer.conf.lua").read_text()
    run("dacctl", "slurm-files", "--force", str(target))
    assert (target / "burst_buffer.conf.lua").read_bytes() == shipped("burst_buffer.conf.lua")


def test_slurm_files_root_never_writes_through_a_planted_link(sticky_dir, decoy):
    # ALICE made the directory an admin was told to use, and plants a link in it
    target = sticky_dir / "slurm"
    assert dacctl_as(ALICE, "slurm-files", str(target)).returncode == 0
    as_user(ALICE, "ln", "-sf", str(decoy), str(target / "burst_buffer.lua"))
    r = run("dacctl", "slurm-files", str(target), check=False)
    assert r.returncode == 1 and "burst_buffer.lua exists and differs" in r.stderr
    assert decoy.read_bytes() == DECOY
    run("dacctl", "slurm-files", "--force", str(target))
    assert decoy.read_bytes() == DECOY  # the link was replaced, never written through
    assert not (target / "burst_buffer.lua").is_symlink()
    assert (target / "burst_buffer.lua").read_bytes() == shipped("burst_buffer.lua")


def test_slurm_files_refuses_a_directory_that_is_a_link(sticky_dir, tmp_path):
    root_dir = tmp_path / "root-only"
    root_dir.mkdir(mode=0o700)
    link = sticky_dir / "slurm"
    as_user(MALLORY, "ln", "-s", str(root_dir), str(link))
    r = run("dacctl", "slurm-files", str(link), check=False)
    assert (r.returncode, r.stderr.strip()) == (
        2,
        (
            f"dacctl: admin error: slurm-files: {link}: a link, or not a directory (give the "
            "directory itself)"
        ),
    )
    assert list(root_dir.iterdir()) == []


def test_slurm_files_as_a_user_writes_only_where_the_user_may(sticky_dir):
    root_dir = sticky_dir / "etc-slurm"  # root's, 0755, where every user can reach it
    root_dir.mkdir(mode=0o755)
    r = dacctl_as(MALLORY, "slurm-files", str(root_dir))
    assert (r.returncode, r.stderr.strip()) == (
        2,
        ("dacctl: admin error: slurm-files: cannot write burst_buffer.lua: Permission denied"),
    )
    assert list(root_dir.iterdir()) == []
    # ALICE's edited copy in her own directory: MALLORY cannot replace it, even with --force
    alice_dir = sticky_dir / "alice"
    assert dacctl_as(ALICE, "slurm-files", str(alice_dir)).returncode == 0
    as_user(ALICE, "sh", "-c", f"echo '# alice' >> {alice_dir}/burst_buffer.conf.lua")
    r = dacctl_as(MALLORY, "slurm-files", "--force", str(alice_dir))
    assert (r.returncode, r.stderr.strip()) == (
        2,
        ("dacctl: admin error: slurm-files: cannot write burst_buffer.conf.lua: Permission denied"),
    )
    assert (alice_dir / "burst_buffer.conf.lua").read_text().endswith("# alice\n")
    assert {(alice_dir / n).stat().st_uid for n in SLURM_FILES} == {ALICE[0]}


def test_slurm_files_writes_burst_buffer_lua_as_lua51_bytecode_on_request(tmp_path):
    """--lua-bytecode LUA: burst_buffer.lua compiled by that Lua 5.1 (docs/slurm.md), named
    by its installed path (so it finds burst_buffer.env), the same bytes again next time;
    an interpreter that is not Lua 5.1 is refused in one line, before anything is written."""
    target = tmp_path / "etc-slurm"
    r = run("dacctl", "slurm-files", "--lua-bytecode", "lua5.1", str(target))
    assert f"{target}/burst_buffer.lua: written" in r.stdout.splitlines()
    compiled = (target / "burst_buffer.lua").read_bytes()
    assert compiled.startswith(b"\x1bLua\x51") and compiled != shipped("burst_buffer.lua")
    probe = subprocess.run(
        [
            "lua5.1",
            "-e",
            f'print(debug.getinfo(assert(loadfile("{target}/burst_buffer.lua")), "S").source)',
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == f"@{target}/burst_buffer.lua"
    for name in SLURM_FILES:
        if name != "burst_buffer.lua":
            assert (target / name).read_bytes() == shipped(name)
    r = run("dacctl", "slurm-files", "--lua-bytecode", "lua5.1", str(target))
    assert f"{target}/burst_buffer.lua: unchanged" in r.stdout.splitlines()
    # the source where the bytecode is: a difference, kept unless --force
    r = run("dacctl", "slurm-files", str(target), check=False)
    assert r.returncode == 1 and "burst_buffer.lua exists and differs" in r.stderr
    other = tmp_path / "other"
    r = run("dacctl", "slurm-files", "--lua-bytecode", "/bin/false", str(other), check=False)
    assert (r.returncode, r.stderr.count("\n")) == (2, 1)
    assert "admin error: slurm-files: /bin/false cannot compile burst_buffer.lua" in r.stderr
    assert not any(other.iterdir())
