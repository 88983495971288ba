"""The configuration reference (``docs/configuration.md``) is generated at each build from
``kafka_actors.config`` (keys, keyword arguments, defaults) and ``kafka_actors.config_docs``
(description, type, valid values, importance, Java's default): every key has all of them on
the built page, and what the page says a key accepts is what its parser accepts."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from kafka_actors import config
from kafka_actors.config_docs import JAVA_DEFAULTS, KEY_DOCS
from kafka_actors.errors import ConfigError

_WORDS = re.compile(r"^[\w.-]+(, [\w.-]+)+$")
_AT_LEAST = re.compile(r"^>= (-?\d+)$")


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def test_every_key_is_documented() -> None:
    assert set(KEY_DOCS) == set(config._SPECS)
    assert set(JAVA_DEFAULTS) <= set(config._SPECS)
    for key, doc in KEY_DOCS.items():
        assert doc.description.strip() and doc.type.strip(), key
        assert doc.importance in ("high", "medium", "low"), key


def test_the_built_reference_has_every_field(docs_site: Path) -> None:
    text = _text(docs_site / "configuration" / "index.html")
    sections = re.split(r"\n(?=[\w.]+¶\n)", text)
    by_key = {s.split("¶", 1)[0]: s for s in sections if "¶" in s}
    for key, (attribute, _parser, _default) in config._SPECS.items():
        doc = KEY_DOCS[key]
        section = by_key.get(key)
        assert section is not None, f"{key}: no section"
        assert " ".join(doc.description.replace("`", "").split()) in " ".join(section.split())
        assert f"Type: {doc.type}; keyword argument {attribute}" in section, key
        assert "Valid values: " in section and "Default: " in section, key
        assert f"Importance: {doc.importance}" in section, key
        assert "Java: " in section, key


@pytest.mark.parametrize("key", sorted(KEY_DOCS))
def test_the_documented_values_are_accepted(key: str) -> None:
    """Listed values parse; a documented lower bound holds (the value below it is refused)."""
    parse = config._SPECS[key][1]
    valid = KEY_DOCS[key].valid
    if _WORDS.match(valid):
        for value in valid.split(", "):
            parse(key, value)
    bound = _AT_LEAST.match(valid)
    if bound:
        low = int(bound.group(1))
        parse(key, low)
        with pytest.raises(ConfigError):
            parse(key, low - 1)
