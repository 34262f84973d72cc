"""mypy --strict holds for every package of dac (issue 47) as pyproject.toml names them: a
package leaves STRICT, or a strict flag leaves its override, or another override turns one
off for it, and this fails (make lint checks the code)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

#: what is under mypy --strict (patterns as pyproject.toml writes them)
STRICT = {
    "daccore.*",
    "dacctl.*",
    "dacd.*",
    "daclocal.*",
    "dacservice.*",
    "playbooks.local.library.dac_local",
}
#: what --strict turns on, per module (`strict` itself is global-only: in an override mypy
#: applies it to every module), and the two of it that are global-only
FLAGS = (
    "disallow_any_generics",
    "disallow_subclassing_any",
    "disallow_untyped_calls",
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "disallow_untyped_decorators",
    "warn_return_any",
    "no_implicit_reexport",
    "strict_equality",
    "extra_checks",
)
GLOBAL_FLAGS = ("check_untyped_defs", "warn_unused_ignores", "warn_redundant_casts")


def _mypy() -> dict[str, Any]:
    root = Path(os.environ.get("DAC_CHECKOUT") or Path(__file__).resolve().parents[2])
    config: dict[str, Any] = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mypy"]
    return config


def _covers(pattern: str, module: str) -> bool:
    """Whether the strict `pattern` takes in `module` (a name or a pattern of an override)."""
    if not pattern.endswith(".*"):
        return module == pattern
    base, name = pattern.removesuffix(".*"), module.removesuffix(".*")
    return name == base or name.startswith(base + ".")


def test_the_strict_modules_keep_every_strict_flag() -> None:
    config = _mypy()
    assert all(config.get(f) is True for f in GLOBAL_FLAGS), GLOBAL_FLAGS
    assert "strict" not in config  # it would hold the tests to --strict too
    overrides: list[dict[str, Any]] = config.get("overrides", [])
    strict = [o for o in overrides if all(o.get(f) is True for f in FLAGS)]
    named = {m for o in strict for m in o["module"]}
    assert STRICT <= named, f"no longer strict: {sorted(STRICT - named)}"


def test_no_other_override_loosens_a_strict_module() -> None:
    for o in _mypy().get("overrides", []):
        loosened = [f for f in (*FLAGS, "check_untyped_defs") if o.get(f) is False]
        loosened += ["ignore_errors"] if o.get("ignore_errors") else []
        modules = o["module"] if isinstance(o["module"], list) else [o["module"]]
        hit = [m for m in modules for s in STRICT if _covers(s, m)]
        assert not (loosened and hit), f"{hit} loses {loosened}"


def test_the_tests_and_benches_are_type_checked_and_no_module_is_skipped() -> None:
    """The tests and benches are checked as httpx checks its tests (mypy's settings above, not
    --strict); no override silences a module's errors."""
    config = _mypy()
    assert {"tests", "bench"} <= set(config["files"])
    skipped = [o["module"] for o in config.get("overrides", []) if o.get("ignore_errors")]
    assert skipped == []
