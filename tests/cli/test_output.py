"""``consume`` output: kcat-style format strings, JSON lines, offsets specs, --help text."""

from __future__ import annotations

import argparse
import json

import pytest

from kafka_actors.cli import _parser
from kafka_actors.cli.consume import StartSpec, parse_offset_specs, parse_stop_specs
from kafka_actors.cli.output import RecordFormatter, unescape
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType

RECORD = ConsumerRecord(
    "orders",
    2,
    41,
    1700000000123,
    TimestampType.CREATE_TIME,
    b"k1",
    b"v\xc3\xa9",
    (("h1", b"x"), ("h2", None)),
    0,
)
NULLS = ConsumerRecord("t", 0, 0, -1, TimestampType.CREATE_TIME, None, None, (), None)


def test_every_token_and_escape() -> None:
    fmt = RecordFormatter("%t|%p|%o|%k|%s|%K|%S|%T|%h|%%\\t\\n")
    assert fmt.format(RECORD) == "orders|2|41|k1|vé|2|3|1700000000123|h1=x,h2=|%\t\n".encode()


def test_nulls_print_as_the_null_text() -> None:
    assert RecordFormatter("[%k][%s][%K][%S]\\n", null="NULL").format(NULLS) == (
        b"[NULL][NULL][-1][-1]\n"
    )


BINARY = ConsumerRecord(
    "t", 0, 7, 1, TimestampType.CREATE_TIME, b"\xff\x00k", b"\x80\xfe\n\xc3(", (), None
)


def test_keys_and_values_are_written_as_their_bytes() -> None:
    assert RecordFormatter("%k|%s|%h").format(RECORD) == b"k1|v\xc3\xa9|h1=x,h2="
    assert RecordFormatter("%k%s").format(BINARY) == b"\xff\x00k\x80\xfe\n\xc3("


def test_kcat_escapes_nul_and_hex() -> None:
    assert unescape("a\\0b\\x1e\\x7Fc\\\\\\q\\x4") == b"a\0b\x1e\x7fc\\\\q\\x4"
    fmt = RecordFormatter("%o\\x1f%s\\0")
    assert fmt.format(BINARY) == b"7\x1f\x80\xfe\n\xc3(\0"


def test_raw_output_with_delimiters() -> None:
    assert RecordFormatter.raw().format(BINARY) == b"\x80\xfe\n\xc3(\n"
    raw = RecordFormatter.raw(delimiter="\\0", key_delimiter="\\t", null="N")
    assert raw.format(BINARY) == b"\xff\x00k\t\x80\xfe\n\xc3(\0"
    assert raw.format(NULLS) == b"N\tN\0"
    assert RecordFormatter.raw(delimiter="%s|").format(NULLS) == b"%s|"


def test_unknown_token_and_lone_percent_are_refused() -> None:
    with pytest.raises(ValueError, match="%x"):
        RecordFormatter("%x")
    with pytest.raises(ValueError, match="lone"):
        RecordFormatter("abc%")


def test_jsonl_base64_and_utf8() -> None:
    line = RecordFormatter.jsonl().format(RECORD)
    assert line.endswith(b"\n")
    assert json.loads(line) == {
        "topic": "orders",
        "partition": 2,
        "offset": 41,
        "timestamp": 1700000000123,
        "timestamp_type": "CreateTime",
        "key": "azE=",
        "value": "dsOp",
        "headers": [["h1", "eA=="], ["h2", None]],
    }
    text = json.loads(RecordFormatter.jsonl(bytes_as="utf8").format(RECORD))
    assert (text["key"], text["value"]) == ("k1", "vé")
    assert json.loads(RecordFormatter.jsonl().format(NULLS))["key"] is None


def test_offset_specs() -> None:
    default, per = parse_offset_specs(["beginning", "1=@1700000000000", "2=-5", "3=42", "0=end"])
    assert default == StartSpec("beginning")
    assert per == {
        1: StartSpec("timestamp", 1700000000000),
        2: StartSpec("relative", 5),
        3: StartSpec("offset", 42),
        0: StartSpec("end"),
    }
    for bad in ("start", "x=1", "@", "1=@-3", "e@", "x@5"):
        with pytest.raises(ValueError):
            parse_offset_specs([bad])


def test_start_and_stop_timestamps_as_kcat_writes_them() -> None:
    values = ["s@1700000000000", "e@1700000005000", "1=e@1700000009000", "2=s@5"]
    assert parse_offset_specs(values) == (
        StartSpec("timestamp", 1700000000000),
        {2: StartSpec("timestamp", 5)},
    )
    assert parse_stop_specs(values) == (1700000005000, {1: 1700000009000})
    assert parse_stop_specs(["beginning", "-5"]) == (None, {})


def test_every_option_of_every_command_has_help() -> None:
    parser = _parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == {"consume", "list", "query", "group", "groups", "probe"}
    for name, command in sub.choices.items():
        assert command.description, name
        for action in command._actions:
            assert action.help and action.help.strip(), (name, action.dest)


def test_negative_offsets_parse_as_values() -> None:
    args = _parser().parse_args(["consume", "-t", "t", "-o", "-5", "-o", "1=-2"])
    assert args.offset == ["-5", "1=-2"]


def test_only_the_commands_that_start_the_demo_cluster_promise_it() -> None:
    parser = _parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        [bootstrap] = [a for a in command._actions if a.dest == "bootstrap_servers"]
        promises = "embedded mock cluster" in (bootstrap.help or "")
        assert promises == (name in ("consume", "list", "probe")), name


def test_kcat_mode_flags_name_the_command() -> None:
    from kafka_actors.cli import kcat_modes

    assert kcat_modes(["-b", "h:1", "-L", "-J"]) == ["list", "-b", "h:1", "-J"]
    assert kcat_modes(["-Q", "-b", "h:1", "-t", "t:0:5"]) == ["query", "-b", "h:1", "-t", "t:0:5"]
    assert kcat_modes(["-C", "-t", "list"]) == ["consume", "-t", "list"]
    assert kcat_modes(["consume", "-t", "t"]) == ["consume", "-t", "t"]
    assert kcat_modes(["--version"]) == ["--version"]
    with pytest.raises(SystemExit):
        kcat_modes(["-C", "-L"])
    args = _parser().parse_args(kcat_modes(["-b", "h:1", "-L", "-J"]))
    assert (args.command, args.json, args.bootstrap_servers) == ("list", True, "h:1")
