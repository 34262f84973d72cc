"""The JSON Schemas of dac's etcd records and of dac.yaml, generated from the pydantic models by
`python -m daccore.settings.schema write` and checked by `... check`. Shipped in the wheel as the
package `daccore.share.schema` (pyproject.toml's package-dir). This file only makes the folder a
package so setuptools maps it."""
