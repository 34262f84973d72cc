"""Slurm's own burst-buffer tests, taken at test time from Debian's source package of a release
and cached like the release chroots (daclocal.releases.cache_dir(), root's): never copied into
this repository.

`testsuite(release)` finds the release's `slurm-wlm` source in the Debian suite that ships it
(the `dists/<suite>/main/source/Sources.xz` index of the mirror apt uses), downloads its
`.orig.tar.gz` through daclocal.fetching's proxies and CA bundle, checks its SHA-256 against the
index and unpacks its `testsuite/` into `slurm-testsuite-<version>/`, complete once its `.ok`
stamp exists; a lock makes two sessions fetch it once. 26.05 runs 24.11's tests (Debian serves
no 26.05 source here; their `test35.*` bodies are Slurm's newest).

`prepare(...)` copies what one release x plugin runs into a work directory the submit user
owns and applies `EDITS`: the only changes made to Slurm's tests, each with the reason it is
needed, listed in docs/slurm.md's conformance table.
"""

from __future__ import annotations

import fcntl
import hashlib
import lzma
import os
import re
import shutil
import ssl
import tarfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from daccore.errors import AdminError
from daclocal import fetching, releases

#: the Debian suite whose source package holds each release's tests
SUITES = {"22.05": "bookworm", "24.11": "trixie", "26.05": "trixie"}
#: the python datawarp test, per release of the tests
PYTHON_TEST = {
    "22.05": "python/tests/parameters/slurm/BurstBufferType/datawarp/test_datawarp.py",
    "24.11": "python/tests/test_125_1.py",
}
EXPECT_TESTS = ("test17.45", "test35.1", "test35.2", "test35.3", "test35.4", "test35.5", "test35.6")


def tests_release(release: str) -> str:
    """Whose tests a release runs: 26.05 runs 24.11's."""
    return "24.11" if release == "26.05" else release


def _opener() -> urllib.request.OpenerDirector:
    """urllib with the site's proxies and CA bundle (daclocal.fetching)."""
    env = fetching.env()
    proxies = {
        scheme: env[f"{scheme}_proxy"] for scheme in ("http", "https") if env.get(f"{scheme}_proxy")
    }
    context = ssl.create_default_context(cafile=fetching.ca_bundle())
    return urllib.request.build_opener(
        urllib.request.ProxyHandler(proxies), urllib.request.HTTPSHandler(context=context)
    )


def _get(url: str, to: Path) -> None:
    try:
        with _opener().open(url, timeout=60) as r, open(to, "wb") as f:
            shutil.copyfileobj(r, f)
    except OSError as e:
        raise AdminError(f"fetching Slurm's tests: {url}: {e}") from e


def _source(mirror: str, suite: str, work: Path) -> tuple[str, str, str]:
    """(version, orig tarball's pool path, its sha256) of slurm-wlm in `suite`."""
    index = work / f"Sources-{suite}.xz"
    _get(f"{mirror}/dists/{suite}/main/source/Sources.xz", index)
    with lzma.open(index, "rt", errors="replace") as f:
        stanzas = f.read().split("\n\n")
    index.unlink()
    for stanza in stanzas:
        if not re.search(r"^Package: slurm-wlm$", stanza, re.M):
            continue
        version = re.search(r"^Version: (\S+)$", stanza, re.M)
        directory = re.search(r"^Directory: (\S+)$", stanza, re.M)
        sha = re.search(r"^ ([0-9a-f]{64}) \d+ (slurm-wlm_\S+\.orig\.tar\.gz)$", stanza, re.M)
        if version and directory and sha:
            return version.group(1), f"{directory.group(1)}/{sha.group(2)}", sha.group(1)
    raise AdminError(
        f"fetching Slurm's tests: Debian {suite} lists no slurm-wlm source "
        f"with an .orig.tar.gz ({mirror})"
    )


def testsuite(release: str) -> Path:
    """The cached `testsuite/` of `release`'s tests (fetched now on first use)."""
    rel = tests_release(release)
    cache = releases.cache_dir()
    done = sorted(cache.glob(f"slurm-testsuite-{rel}.*/.ok"))
    if done:
        return done[-1].parent / "testsuite"
    releases._root_only_dir(cache)
    with open(cache / f".slurm-testsuite-{rel}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be fetching it
        done = sorted(cache.glob(f"slurm-testsuite-{rel}.*/.ok"))
        if done:
            return done[-1].parent / "testsuite"
        return _fetch(rel, cache)


def _fetch(rel: str, cache: Path) -> Path:
    started = time.monotonic()
    build = cache / f"slurm-testsuite-{rel}.build"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(mode=0o755)
    mirror = releases._mirror().rstrip("/")
    version, pool_path, sha = _source(mirror, SUITES[rel], build)
    if not version.startswith(rel + "."):
        raise AdminError(
            f"fetching Slurm's tests: Debian {SUITES[rel]} has slurm-wlm {version}, not {rel}"
        )
    tarball = build / pool_path.rsplit("/", 1)[1]
    _get(f"{mirror}/{pool_path}", tarball)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != sha:
        raise AdminError(
            f"fetching Slurm's tests: {tarball.name} has SHA-256 {digest}, "
            f"Debian's index says {sha}"
        )
    with tarfile.open(tarball) as tar:
        # files and directories only, none outside the tree (Debian 12's Python 3.11.2 has no
        # extraction filters)
        members = [
            m
            for m in tar.getmembers()
            if m.name.split("/")[1:2] == ["testsuite"]
            and (m.isfile() or m.isdir())
            and not m.name.startswith("/")
            and ".." not in m.name.split("/")
        ]
        tar.extractall(build, members=members)
    tarball.unlink()
    (top,) = [p for p in build.iterdir() if p.is_dir()]
    top.joinpath("testsuite").rename(build / "testsuite")
    top.rmdir()
    for dirpath, dirnames, filenames in os.walk(build):  # root's, readable by all
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    upstream = version.split("-")[0].removesuffix("+dfsg")
    final = cache / f"slurm-testsuite-{upstream}"
    shutil.rmtree(final, ignore_errors=True)
    build.rename(final)
    (final / ".ok").write_text(
        f"slurm-wlm {version} ({pool_path}, sha256 {sha}) in {time.monotonic() - started:.0f}s\n"
    )
    return final / "testsuite"


def version_of(suite: Path) -> str:
    """The Debian version the cached tests come from, e.g. 24.11.5-4."""
    return (suite.parent / ".ok").read_text().split()[1]


@dataclass(frozen=True)
class Edit:
    """One change to a fetched test: `old` (which must be there; a regular expression when
    `regex`) becomes `new`."""

    old: str
    new: str
    why: str
    regex: bool = False


#: The changes made to Slurm's tests before they run against dac, by plugin and file
#: ("python" is the datawarp python test). Each says why; docs/slurm.md names them.
_EMULATE = Edit(
    "if [check_bb_emulate] {",
    "if 0 {",
    "dac stages for real under Flags=EmulateCray too (the flag only tells Slurm that "
    "GetSysState is not Cray's own dw_wlm_cli): the test's real-DataWarp branch applies, "
    "not the one expecting no stage-out",
)
_LUA = Edit(
    '[param_contains [get_config_param "BurstBufferType"] "*datawarp"]',
    '[param_contains [get_config_param "BurstBufferType"] "*lua"]',
    "the test's lua-applicable checks, under burst_buffer/lua (Directive=DW: the same #DW "
    "lines reach dac)",
)
_POOL = Edit(
    "capacity=1GiB access_mode",
    "capacity=1GiB pool=default access_mode",
    "burst_buffer/lua requires pool= beside capacity= (it ignores burst_buffer.conf's DefaultPool)",
)
_TEARDOWNS = Edit(
    "# Wait for stage-out completion\nsleep 5\n",
    "# Wait for stage-out completion\nsleep 20\n",
    "the three tasks' stage-outs and teardowns are given 5 s where test35.2 gives its one 10 s; "
    "each of dac's is a real unmount, zeroing and Ansible run: seen, two of three still in "
    "teardown after 5 s at load 7 on 2 cores (Cray's emulator has nothing to tear down)",
)
EDITS: dict[str, dict[str, tuple[Edit, ...]]] = {
    "datawarp": {
        "test35.2": (_EMULATE,),
        "test35.3": (_EMULATE, _TEARDOWNS),
        "python": (
            Edit(
                "dw_wlm_cli_client = f\"{atf.properties['slurm-sbin-dir']}/dw_wlm_cli\"",
                "dw_wlm_cli_client = os.environ['DAC_DACCTL']",
                "dac's dw_wlm_cli is what GetSysState names (dacctl, or dac's forwarder to "
                "the answerer where it runs), not a file called dw_wlm_cli in Slurm's sbin",
            ),
            Edit(
                "dwstat_client = f\"{atf.properties['slurm-sbin-dir']}/dwstat\"",
                "dwstat_client = os.environ['DAC_BBSTAT']",
                "dac's dwstat is dac-bbstat (GetSysStatus names it)",
            ),
            Edit("import atf\n", "import atf\nimport os\n", "for the two paths above"),
            Edit(
                r"""atf\.require_config_parameter\(\s*["']AllowUsers["'][^)]*\)""",
                "pass",
                "the local DAC's burst_buffer.conf has no AllowUsers line (every user may "
                "have buffers), which lets the test's user too",
                regex=True,
            ),
        ),
    },
    "lua": {
        "test35.2": (_EMULATE, _LUA, _POOL),
        "test35.3": (_EMULATE, _LUA, _POOL, _TEARDOWNS),
        "test35.6": (_LUA, _POOL),
    },
}
#: atf (the python tests' library) runs a command "as" SlurmUser through `sudo -u`, and skips
#: without sudo rights; the local DAC's config files are readable by the test's user
ATF_EDIT = Edit(
    r"""if user is not None and user != properties\[["']test-user["']\]:""",
    "if False:  # dac: no sudo",
    "atf reads Slurm's config files and checks dacctl as SlurmUser through sudo; "
    "the test's user reads them itself (no sudo rights are given to it)",
    regex=True,
)
#: atf's further edits, by the release of the tests
ATF_EDITS = {
    "24.11": (
        Edit(
            r"(?m)^import requests$",
            "requests = None  # dac: only slurmrestd's tests use it",
            "atf imports requests for slurmrestd's tests alone; the burst-buffer test never "
            "uses it, "
            "and dac's test venv does not install it",
            regex=True,
        ),
    )
}

#: the python tests' conftest, by the release of the tests
CONFTEST_EDITS = {
    "22.05": (
        Edit(
            "from py.io import TerminalWriter",
            "from _pytest._io import TerminalWriter",
            "pytest 7.2 and later no longer ship the py library; its TerminalWriter is "
            "pytest's own "
            "(24.11's conftest no longer imports it)",
        ),
    )
}


def apply(text: str, edits: tuple[Edit, ...], name: str) -> str:
    for e in edits:
        if e.regex:
            text, n = re.subn(e.old, e.new, text)
        else:
            n = text.count(e.old)
            text = text.replace(e.old, e.new)
        if n < 1:
            raise AssertionError(
                f"{name}: the edit '{e.why}' no longer applies: {e.old!r} is not in the test"
            )
    return text


def prepare(suite: Path, release: str, plugin: str, work: Path) -> None:
    """`work`/expect (globals and the tests, edited) and `work`/python (conftest, atf, the
    datawarp test, edited), for one plugin."""
    edits = EDITS[plugin]
    (work / "expect").mkdir()
    for name in ("globals", *EXPECT_TESTS):
        text = (suite / "expect" / name).read_text()
        (work / "expect" / name).write_text(apply(text, edits.get(name, ()), name))
    py = work / "python"
    (py / "lib").mkdir(parents=True)
    (py / "tests").mkdir()
    conftest = (suite / "python" / "conftest.py").read_text()
    (py / "conftest.py").write_text(
        apply(conftest, CONFTEST_EDITS.get(tests_release(release), ()), "conftest.py")
    )
    atf = (suite / "python" / "lib" / "atf.py").read_text()
    (py / "lib" / "atf.py").write_text(
        apply(atf, (ATF_EDIT, *ATF_EDITS.get(tests_release(release), ())), "atf.py")
    )
    if plugin == "datawarp":
        src = suite / PYTHON_TEST[tests_release(release)]
        text = src.read_text()
        (py / "tests" / src.name).write_text(apply(text, edits["python"], src.name))
