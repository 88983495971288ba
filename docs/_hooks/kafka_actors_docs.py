"""mkdocs hooks of the kafka-actors site.

* ``<!-- config-reference -->`` in a page is replaced by the table of every configuration key
  of :mod:`kafka_actors.config` (its ``_SPECS``: Kafka name, default) and the module's notes,
  generated at each build, so the reference cannot drift from the code.
* Pages written on other branches (``metrics.md``, ``fault-injection.md``) are in the nav;
  until they exist the nav entry is dropped (and said so in the build log) instead of failing
  the strict build. Every other missing page still fails it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.kafka_actors")

PENDING_PAGES = {"metrics.md", "fault-injection.md"}
MARKER = "<!-- config-reference -->"


def _drop_missing(items: list[Any], docs_dir: Path) -> list[Any]:
    kept: list[Any] = []
    for item in items:
        if isinstance(item, dict):
            ((title, value),) = item.items()
            if isinstance(value, list):
                kept.append({title: _drop_missing(value, docs_dir)})
                continue
            if value in PENDING_PAGES and not (docs_dir / value).is_file():
                log.info("nav: %s (%s) is not written yet; left out", title, value)
                continue
        kept.append(item)
    return kept


def on_config(config: Any) -> Any:
    config["nav"] = _drop_missing(config["nav"], Path(config["docs_dir"]))
    return config


def _default(value: object) -> str:
    if value is None:
        return "*(none)*"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (list, tuple)):
        return "`" + ",".join(str(v) for v in value) + "`" if value else "*(empty)*"
    if value == "":
        return '`""`'
    return f"`{value}`"


def config_reference() -> str:
    from kafka_actors import config

    rows = ["| key | default | keyword argument |", "| --- | --- | --- |"]
    for key, (attribute, _parser, default) in config._SPECS.items():
        rows.append(f"| `{key}` | {_default(default)} | `{attribute}` |")
    notes = (config.__doc__ or "").strip()
    return (
        "\n".join(rows)
        + "\n\n## Notes from `kafka_actors/config.py`\n\n"
        + "```text\n"
        + notes
        + "\n```\n"
    )


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, config_reference())
    return markdown
