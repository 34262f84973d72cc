"""JSON Schema of every record and of the config, generated from the models into
`schema/`.

    python -m daccore.settings.schema write    regenerate schema/*.json
    python -m daccore.settings.schema check    exit 1 when schema/ differs from the models
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from daccore.records.models import RECORDS
from daccore.settings.config import DacConfig
from daccore.share import asset

__all__ = ["schemas", "SCHEMA_DIR"]

#: the checkout's top-level schema/ (or the installed copy): the package daccore.share.schema
SCHEMA_DIR = asset("schema", directory=True)


def schemas() -> dict[str, str]:
    """file name -> JSON text, for every record and the config."""
    models: dict[str, type[BaseModel]] = {**RECORDS, "config": DacConfig}
    out = {}
    for stem, model in models.items():
        schema = model.model_json_schema()
        schema["$id"] = f"https://dac.invalid/schema/{stem}.json"
        out[f"{stem}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def _drift(directory: Path) -> list[str]:
    wanted = schemas()
    stale = [
        n
        for n, text in wanted.items()
        if not (directory / n).exists() or (directory / n).read_text() != text
    ]
    extra = [p.name for p in directory.glob("*.json") if p.name not in wanted]
    return stale + extra


def main(argv: list[str]) -> int:
    if argv[:1] == ["write"]:
        SCHEMA_DIR.mkdir(exist_ok=True)
        for p in SCHEMA_DIR.glob("*.json"):
            p.unlink()
        for name, text in schemas().items():
            (SCHEMA_DIR / name).write_text(text)
        print(f"wrote {len(schemas())} schemas to {SCHEMA_DIR}")
        return 0
    if argv[:1] == ["check"]:
        drift = _drift(SCHEMA_DIR)
        if drift:
            print(f"schema/ is out of date for: {', '.join(drift)}; run `make schema`")
            return 1
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
