"""mkdocs hooks of the kafka-actors site.

* ``<!-- config-reference -->`` in a page is replaced by the reference of every configuration
  key of :mod:`kafka_actors.config` (its ``_SPECS``: Kafka name, keyword, default; and
  :mod:`kafka_actors.config_docs`: description, type, valid values, importance, Java's
  default) and the module's notes, generated at each build, so the reference cannot drift
  from the code.
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


def _as_java_text(value: object) -> str:
    """Our default spelled as Java prints its own, to compare the two."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def java_equivalence(key: str, default: object) -> str:
    from kafka_actors.config_docs import JAVA_DEFAULTS

    if key not in JAVA_DEFAULTS:
        return "not a Java consumer key"
    java = JAVA_DEFAULTS[key]
    if java is None:
        return "same key; Java has no default (it must be given)"
    if java == _as_java_text(default):
        return "same key and default"
    shown = f"`{java}`" if java else '`""`'
    return f"same key; Java's default is {shown}"


def config_reference() -> str:
    """The reference of every key: description, type, valid values, default, importance,
    Java equivalence, from ``config._SPECS`` and ``config_docs.KEY_DOCS``. A key without
    documentation (or documentation without a key) fails the build."""
    from kafka_actors import config
    from kafka_actors.config_docs import KEY_DOCS

    undocumented = sorted(set(config._SPECS) - set(KEY_DOCS))
    unknown = sorted(set(KEY_DOCS) - set(config._SPECS))
    if undocumented or unknown:
        raise ValueError(
            f"config_docs.KEY_DOCS is out of date: undocumented keys {undocumented}, "
            f"documented keys that do not exist {unknown}"
        )
    summary = ["| key | default | importance |", "| --- | --- | --- |"]
    sections: list[str] = []
    for key, (attribute, _parser, default) in config._SPECS.items():
        doc = KEY_DOCS[key]
        anchor = key.replace(".", "-")
        summary.append(f"| [`{key}`](#{anchor}) | {_default(default)} | {doc.importance} |")
        valid = doc.valid or f"any {doc.type}"
        sections.append(
            f"### `{key}` {{ #{anchor} }}\n\n"
            f"{doc.description}\n\n"
            f"- **Type**: `{doc.type}`; keyword argument `{attribute}`\n"
            f"- **Valid values**: {valid}\n"
            f"- **Default**: {_default(default)}\n"
            f"- **Importance**: {doc.importance}\n"
            f"- **Java**: {java_equivalence(key, default)}\n"
        )
    notes = (config.__doc__ or "").strip()
    return (
        "\n".join(summary)
        + "\n\n## Keys\n\n"
        + "\n".join(sections)
        + "\n## Notes from `kafka_actors/config.py`\n\n"
        + "```text\n"
        + notes
        + "\n```\n"
    )


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, config_reference())
    return markdown
