"""What dac ships besides code, inside the package so a wheel carries it: the Ansible playbooks
(the checkout's top-level `playbooks/<backend>/`), Slurm's plugin files (`slurm-plugin/`:
burst_buffer.lua, the two sample burst_buffer.conf and burst_buffer/datawarp's forwarders
dw_wlm_cli.lua and dwstat.lua), the JSON Schemas of the records and config (`schema/`), the C
library of in-job stages with its example (`libdacstage/`: users build it with make), and,
here, the sample dac.yaml and the systemd units (`packaging/`).

The three top-level folders are the design's top level; pyproject.toml's `package-dir` maps each
to a package below this one (`daccore.share.playbooks`, `daccore.share.slurm`,
`daccore.share.schema`), so the wheel carries them where it always did and an editable install
finds them in the checkout.

Found through `importlib.resources`, never by walking up from a module to a checkout, so an
installed wheel and a source tree read the same files. Ansible and slurmctld need real files,
so a package that is not unpacked on disk (a zip import) is an internal error, as is a missing
file: both mean the installation is broken, not that the user or the admin did something."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from daccore.errors import InternalError

__all__ = ["asset", "SLURM_FILES", "SLURM_EXECUTABLES"]

#: what `dacctl slurm-files DIR` copies out for a site's Slurm configuration directory
SLURM_FILES = (
    "burst_buffer.lua",
    "burst_buffer.env",
    "burst_buffer.conf.lua",
    "burst_buffer.conf.datawarp",
    "dw_wlm_cli.lua",
    "dwstat.lua",
)
#: those of SLURM_FILES slurmctld runs itself (burst_buffer/datawarp's GetSysState and
#: GetSysStatus): 0755
SLURM_EXECUTABLES = frozenset({"dw_wlm_cli.lua", "dwstat.lua"})


#: the asset folders that are packages of their own (mapped from the checkout's top level), and
#: the folder each is in a checkout, for messages
_MAPPED = {
    "playbooks": "playbooks",
    "slurm": "slurm-plugin",
    "schema": "schema",
    "libdacstage": "libdacstage",
}


def asset(*parts: str, directory: bool = False) -> Path:
    """The installed file (or, with `directory`, directory) `parts` below this package, e.g.
    `asset("playbooks", "local", directory=True)`; InternalError naming it when absent."""
    if parts and parts[0] in _MAPPED:
        # through the mapped package itself: in an editable install it is not below this folder
        found = files(f"{__name__}.{parts[0]}").joinpath(*parts[1:])
        name = "/".join((_MAPPED[parts[0]],) + parts[1:])
    else:
        found = files(__name__).joinpath(*parts)
        name = "/".join(("daccore/share",) + parts)
    if not isinstance(found, Path):
        raise InternalError(
            f"dac's {name} is not a file on disk; install dac unpacked "
            "(pip install the wheel), not as a zip"
        )
    if not (found.is_dir() if directory else found.is_file()):
        raise InternalError(f"dac's {name} is missing from this installation; reinstall dac")
    return found
