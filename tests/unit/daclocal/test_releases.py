"""The Slurm releases the local DAC runs (daclocal/releases.py): what runs where, with what
configuration; the chroots themselves are built and run by tests/e2e."""

from pathlib import Path

import pytest
from clitools import run

from daccore.errors import AdminError
from daclocal import releases
from daclocal.slurm import SlurmCluster


def test_the_releases_and_who_runs_slurmctld():
    assert releases.release(None).host and releases.release("22.05").slurm_user == "root"
    for name, suite in (("24.11", "trixie"), ("26.05", "forky")):
        r = releases.release(name)
        assert (r.suite, r.slurm_user, r.at_least_24_05) == (suite, "slurm", True)
    with pytest.raises(
        AdminError,
        match=r"unknown Slurm release '23.02' \(choose 22.05, "
        r"24.11, 26.05\)",
    ):
        releases.release("23.02")


def test_a_cache_anyone_else_can_write_to_is_refused(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    monkeypatch.setenv("DAC_LOCAL_CACHE", str(cache))
    with pytest.raises(AdminError, match="not a directory of root's alone"):
        releases.ensure_chroot(releases.release("24.11"))


def test_a_chroot_daemon_sees_the_host_paths_it_needs_and_runs_as_slurm_user(tmp_path):
    argv = releases.daemon_argv(
        releases.release("24.11"), tmp_path, ["/usr/sbin/slurmctld", "-D"], "slurm"
    )
    assert argv[:5] == ["unshare", "--mount", "--propagation", "slave", "--"]
    assert argv[-2:] == ["/usr/sbin/slurmctld", "-D"]
    script = argv[7]
    root = str(releases.chroot_dir(releases.release("24.11")))
    assert f"R={root}\n" in script and "chroot --userspec=slurm:slurm" in script
    shared = script.split("for d in ")[2].split(";")[0].split()  # the rbind-ed host trees
    assert "/tmp" in shared and "/home" in shared  # jobs' and users' files, where they are
    assert "/etc/passwd /etc/group" in script  # the host's users, same uids inside
    # the chroot at its own path, read-only: slurm.conf's PluginDir names its plugins
    assert root in script.split("for d in ")[3]


def test_a_node_sees_its_own_root_at_the_mount_root(tmp_path):
    argv = releases.daemon_argv(
        releases.release("26.05"),
        tmp_path,
        ["/usr/sbin/slurmd"],
        node_view=("/w/nodes/node1", "/w/mnt"),
    )
    assert "mount --bind /w/nodes/node1 /w/mnt\n" in argv[7]
    assert "--userspec" not in argv[7]


def test_outermost_drops_nested_paths():
    assert releases._outermost(["/a/b", "/a", "/c", "/", "/ab"]) == ["/a", "/ab", "/c"]


def test_client_wrappers_run_the_chroots_binaries_with_its_loader(tmp_path, monkeypatch):
    monkeypatch.setenv("DAC_LOCAL_CACHE", str(tmp_path / "cache"))
    rel = releases.release("24.11")
    root = releases.chroot_dir(rel)
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/sbatch").write_text("")
    releases.write_client_wrappers(rel, tmp_path / "bin")
    assert [p.name for p in (tmp_path / "bin").iterdir()] == ["sbatch"]
    text = (tmp_path / "bin" / "sbatch").read_text()
    assert f"exec {root}/lib64/ld-linux-x86-64.so.2 --argv0 sbatch --library-path " in text
    assert text.rstrip().endswith(f'{root}/usr/bin/sbatch "$@"')
    assert (tmp_path / "bin" / "sbatch").stat().st_mode & 0o777 == 0o755


def test_a_chroot_release_slurm_conf(tmp_path, monkeypatch):
    monkeypatch.setenv("DAC_LOCAL_CACHE", str(tmp_path / "cache"))
    cluster = SlurmCluster(tmp_path, 2, "lua", "/etc/dac/dac.yaml", release="24.11")
    (cluster.base / "etc").mkdir(parents=True)
    cluster._write_configs()
    conf = cluster.conf.read_text()
    assert "SlurmUser=slurm\n" in conf and "SlurmdUser=root\n" in conf
    assert f"PluginDir={tmp_path}/cache/slurm-24.11/usr/lib/x86_64-linux-gnu/slurm-wlm\n" in conf
    assert (cluster.base / "etc/cgroup.conf").read_text() == "CgroupPlugin=disabled\n"
    env = dict(
        line.split("=", 1)
        for line in (cluster.base / "etc/burst_buffer.env").read_text().splitlines()
    )
    assert env["DAC_CONFIG"] == "/etc/dac/dac.yaml" and env["SLURM_CONF"] == str(cluster.conf)
    assert env["DACCTL"].endswith("/dacctl") and env["DAC_BBSTAT"].endswith("/dac-bbstat")
    assert cluster.client("scontrol") == f"{tmp_path.resolve()}/slurm/bin/scontrol"


def test_the_host_release_keeps_its_own_commands_and_root(tmp_path):
    cluster = SlurmCluster(tmp_path, 2, "datawarp")
    (cluster.base / "etc").mkdir(parents=True)
    cluster._write_configs()
    conf = cluster.conf.read_text()
    assert "SlurmUser=root\n" in conf and "PluginDir" not in conf
    assert not (cluster.base / "etc/cgroup.conf").exists()
    assert cluster.client("scontrol") == "scontrol" and cluster.bindir is None


def test_dacctl_local_up_names_the_releases():
    r = run("dacctl", "local", "up", "--help")
    assert "--slurm-release [22.05|24.11|26.05]" in r.stdout
    assert "--etcd-release [3.4|3.5|3.6]" in r.stdout


def test_debians_own_interpreter_comes_in_by_its_files_not_its_usr(tmp_path, monkeypatch):
    # /usr bound over the chroot's would run the host's Slurm instead of the release's: an
    # interpreter under /usr brings its binary (every name the venv reaches it by), its stdlib
    # and /etc/pythonX.Y, each at its own path
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/python3").symlink_to("/usr/bin/python3")
    (venv / "bin/python").symlink_to("python3")
    monkeypatch.setattr("sys.base_prefix", "/usr")
    monkeypatch.setattr("sys.executable", str(venv / "bin/python"))
    monkeypatch.setattr("sys._base_executable", "/usr/bin/python3.11")
    monkeypatch.setattr(
        "sys.path", ["", "/usr/lib/python3.11", "/usr/lib/python3.11/lib-dynload", str(venv)]
    )
    dirs, files = releases._host_python_paths()
    assert "/usr" not in dirs and "/" not in dirs and "/usr/bin" not in dirs
    assert "/usr/lib/python3.11" in dirs and str(venv) in dirs
    assert "/usr/bin/python3" in files and "/usr/bin/python3.11" in files
    assert all(f.startswith("/usr/") for f in files)
    script = releases.daemon_argv(releases.release("24.11"), tmp_path, ["/usr/sbin/slurmctld"])[7]
    readonly_files = script.split("for f in ")[1].split(";")[0].split()
    assert "/usr/bin/python3" in readonly_files
    binds = script.split("for d in ")[3].split(";")[0].split()
    assert "/usr" not in binds and "/usr/lib/python3.11" in binds


def test_a_chroot_build_trusts_the_hosts_ca_and_fails_in_one_line(tmp_path, monkeypatch):
    # debootstrap's minbase has no /etc/ssl/certs: the CA bundle's directory is made first
    cache = tmp_path / "cache"
    monkeypatch.setenv("DAC_LOCAL_CACHE", str(cache))
    bundle = tmp_path / "proxy-ca.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    ran = []

    def fake_run(argv, what, log, timeout, extra_env=None):
        ran.append(what)
        if what == "debootstrap":  # what minbase leaves: no etc/ssl
            build = Path(argv[3])
            for d in ("usr/sbin", "etc/apt/apt.conf.d"):
                (build / d).mkdir(parents=True)
            assert extra_env == {"WGETRC": str(cache / "wgetrc")}
        if what == "apt-get install":
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(releases, "_run", fake_run)
    with pytest.raises(
        AdminError,
        match=r"^building the Slurm 24.11 chroot: \[Errno 28\] No "
        r"space left on device \(log: .*slurm-24.11.log\)$",
    ):
        releases.ensure_chroot(releases.release("24.11"))
    build = cache / "slurm-24.11.build"
    assert (build / "etc/ssl/certs/dac-local-ca.crt").read_text() == bundle.read_text()
    assert (
        'Acquire::https::CAInfo "/etc/ssl/certs/dac-local-ca.crt";'
        in (build / "etc/apt/apt.conf.d/99dac-local").read_text()
    )
    assert ran == ["debootstrap", "apt-get install"]


def test_a_cached_chroot_without_lua_socket_gets_it_in_place_once(tmp_path, monkeypatch):
    # a chroot cached before lua-socket and lua5.1 were in PACKAGES: one apt-get install of
    # both, no rebuild
    monkeypatch.setenv("DAC_LOCAL_CACHE", str(tmp_path / "cache"))
    root = releases.chroot_dir(releases.release("26.05"))
    (root / "var/lib/dpkg").mkdir(parents=True)
    status = root / "var/lib/dpkg/status"
    status.write_text(
        "Package: slurmctld\nStatus: install ok installed\n\n"
        "Package: lua-socket\nStatus: deinstall ok config-files\n\n"
    )
    (root / ".ok").write_text("slurmctld 26.05.5-1 built in 26s\n")
    ran = []

    def fake_run(argv, what, log, timeout, extra_env=None):
        ran.append((what, argv[-1]))
        status.write_text(
            status.read_text() + "Package: lua-socket\nPriority: optional\n"
            "Status: install ok installed\n\nPackage: lua5.1\nStatus: install ok installed\n\n"
        )

    monkeypatch.setattr(releases, "_run", fake_run)
    assert releases.ensure_chroot(releases.release("26.05")) == root
    assert releases.ensure_chroot(releases.release("26.05")) == root
    assert len(ran) == 1 and ran[0][0] == "apt-get install"
    assert ran[0][1].startswith("apt-get update -q && ") and " lua-socket lua5.1 " in ran[0][1]
    assert "lua-socket lua5.1 added in" in (root / ".ok").read_text()
    assert releases.version(releases.release("26.05")) == "26.05.5-1"
    assert {"lua-socket", "lua5.1"} <= set(releases.PACKAGES)
