"""The Java properties reader of ``--consumer-config``: java.util.Properties.load's rules."""

from __future__ import annotations

import pathlib

import pytest

from kafka_actors.cli.properties import load_properties, parse_properties
from kafka_actors.errors import ConfigError


def test_separators_blanks_and_comments() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "   \n"
        "bootstrap.servers=h1:9092,h2:9092\n"
        "security.protocol : SASL_SSL\n"
        "  sasl.mechanism SCRAM-SHA-512\n"
        "client.id=\n"
        "lonely.key\n"
        "trailing.blanks = kept  \n"
        "equals.in.value=a=b:c\n"
    )
    assert parse_properties(text) == {
        "bootstrap.servers": "h1:9092,h2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "client.id": "",
        "lonely.key": "",
        "trailing.blanks": "kept  ",
        "equals.in.value": "a=b:c",
    }


def test_line_continuations_skip_leading_blanks_and_a_comment_never_continues() -> None:
    text = (
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" \\\n'
        '    password="alice-secret";\n'
        "# comment ending in a backslash \\\n"
        "next.key=1\n"
        "two.backslashes=a\\\\\n"
        "not.continued=2\n"
        "continued.comment.like=x\\\n"
        "   # not a comment here\n"
    )
    assert parse_properties(text) == {
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="alice" password="alice-secret";',
        "next.key": "1",
        "two.backslashes": "a\\",
        "not.continued": "2",
        "continued.comment.like": "x# not a comment here",
    }


def test_escapes_in_keys_and_values() -> None:
    text = (
        "key\\ with\\ spaces=v\n"
        "key\\=eq\\:colon=\\t\\n\\r\\f|\\u00e9\\u20AC|\\z\n"
        "path=C:\\\\kafka\\\\truststore.pem\n"
    )
    assert parse_properties(text) == {
        "key with spaces": "v",
        "key=eq:colon": "\t\n\r\f|é€|z",
        "path": "C:\\kafka\\truststore.pem",
    }


def test_last_value_wins_and_line_endings() -> None:
    assert parse_properties("a=1\r\nb=2\ra=3\n") == {"a": "3", "b": "2"}


def test_malformed_unicode_escape_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="line 2"):
        parse_properties("ok=1\nbad=\\u12G4\n")


def test_files_utf8_latin1_and_missing(tmp_path: pathlib.Path) -> None:
    utf8 = tmp_path / "a.properties"
    utf8.write_bytes("\ufeffsasl.password=pässwörd\n".encode())
    assert load_properties(utf8) == {"sasl.password": "pässwörd"}
    latin1 = tmp_path / "b.properties"
    latin1.write_bytes("sasl.password=p\xe4ss\n".encode("latin-1"))
    assert load_properties(latin1) == {"sasl.password": "päss"}
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_properties(tmp_path / "missing.properties")


def test_other_clients_keys_in_a_file_are_ignored_with_a_note(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafka_actors.cli import _parser, build_config
    from kafka_actors.config import ConsumerConfig

    shared = tmp_path / "client.properties"
    shared.write_text(
        "bootstrap.servers=h1:9092\n"
        "security.protocol=PLAINTEXT\n"
        "acks=all\n"
        "linger.ms=5\n"
        "key.serializer=org.apache.kafka.common.serialization.StringSerializer\n"
        "value.deserializer=org.apache.kafka.common.serialization.StringDeserializer\n"
        "default.replication.factor=3\n"
    )
    args = _parser().parse_args(["list", "--command-config", str(shared)])
    config = build_config(args)
    assert config == {"bootstrap.servers": "h1:9092", "security.protocol": "PLAINTEXT"}
    ConsumerConfig.from_dict(config)
    note = capsys.readouterr().err
    for key in ("acks", "linger.ms", "key.serializer", "value.deserializer"):
        assert key in note
    assert "bootstrap.servers" not in note
    # -q: no note; -X keys are still the consumer's only (a typo there is an error).
    quiet = _parser().parse_args(["list", "-q", "--command-config", str(shared), "-X", "acks=1"])
    with pytest.raises(ConfigError, match="acks"):
        ConsumerConfig.from_dict(build_config(quiet))
    assert capsys.readouterr().err == ""
