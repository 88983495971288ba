"""Command line of kafka-actors: ``python -m kafka_actors <command>``.

Owns: argument parsing, the consumer configuration a command runs with (``--consumer-config``
files, ``-X key=value``), and the lifetime of what a command starts. The commands live in
their own modules: :mod:`.consume`, :mod:`.admin` (``list``, ``group``), :mod:`.probe`.
May touch: the public consumer API, the NetworkActor (admin queries), the testkit (to start
the embedded cluster when no ``--bootstrap-servers`` is given).

Commands (``--help`` on each for every option):

* ``consume``: print records, kcat style (``-f`` format strings or JSON lines), from the
  beginning / end / an offset / a timestamp, per partition; ``-e`` exits at the end of the
  partitions. In a group it subscribes and commits what it printed.
* ``list``: topics with their partitions, leaders, replicas and in-sync replicas.
* ``query``: offsets for times (kcat's ``-Q``), ``TOPIC:PARTITION:TIMESTAMP_MS``.
* ``group``: a group's state, members, assignments, committed offsets, log end offsets and
  lag (``kafka-consumer-groups --describe``).
* ``probe``: ApiVersions, metadata and the records of one topic through the protocol layer.

Every command but ``probe`` takes the consumer's whole configuration (so SASL and TLS
clusters work): ``--consumer-config FILE`` (Java properties, as Kafka's tools read them; may
be repeated) and ``-X key=value`` (may be repeated; applied after the files), then the
command's own options. Without a bootstrap server from any of them, ``consume``, ``list`` and
``probe`` start the embedded mock cluster and fill a demo topic. Nothing writes to a cluster
you name unless asked (``probe --produce-demo``), and no command creates a topic.

kcat's mode flags (``-C``, ``-L``, ``-Q``) name the command too (:func:`kcat_modes`). Exit
status as kcat's: 0 done, 1 a Kafka error (an unknown topic), 2 a usage or configuration
error, 130 interrupted, 141 (128 + SIGPIPE) when stdout's reader went away, without a
traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from kafka_actors.cli.consume import ByteSink
from kafka_actors.cli.output import FORMAT_TOKENS, RecordFormatter
from kafka_actors.cli.properties import load_properties, parse_properties

__all__ = [
    "binary_sink",
    "build_config",
    "consumer_settings",
    "kcat_modes",
    "load_properties",
    "main",
    "parse_properties",
]

_DEMO_TOPIC = "kafka-actors-demo"
_TEXT_FORMAT = "%t-%p@%o\\t%k\\t%s\\n"
_FAILED = 1  # exit status of a Kafka error (an unknown topic, a broker's error)
_ISSUES = 2  # exit status of a usage or configuration error
_SIGPIPE = 128 + 13  # exit status when stdout's reader went away, as a shell reports SIGPIPE


def _add_verbosity_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-d",
        "--debug",
        action="store_true",
        help="write the client's debug log lines to stderr (connections, requests, groups)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="write nothing to stderr but errors (no progress, no notes, no warnings)",
    )


def _add_config_options(p: argparse.ArgumentParser, *, demo: bool) -> None:
    _add_verbosity_options(p)
    p.add_argument(
        "-b",
        "--bootstrap-servers",
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help="brokers to start from (overrides bootstrap.servers of -X and the config files)"
        + (
            "; without any, the embedded mock cluster is started with demo records"
            if demo
            else "; required (here or in the configuration)"
        ),
    )
    p.add_argument(
        "--consumer-config",
        "--command-config",
        metavar="FILE",
        action="append",
        default=[],
        help="a Java properties file of consumer settings (key=value or key: value, # and ! "
        "comments, \\ continuations and escapes), e.g. security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.truststore.location; may be repeated, later files win; keys of "
        "other clients (producer, admin) are ignored with a note, as Java's tools do",
    )
    p.add_argument(
        "-X",
        dest="settings",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="one consumer setting by Kafka's name (e.g. -X security.protocol=SASL_SSL "
        "-X fetch.max.bytes=1048576); may be repeated; applied after --consumer-config",
    )


#: Keys a consumer knows but the CLI cannot take from a file: in Java's files they name
#: classes; the CLI prints the bytes (or decodes them itself).
_CLASS_KEYS = frozenset({"key.deserializer", "value.deserializer"})


def consumer_settings(
    path: str, properties: dict[str, str], notes: TextIO | None
) -> dict[str, object]:
    """The settings of a properties file the consumer understands. A file shared with other
    clients holds their keys too (``acks``, ``linger.ms``, ``key.serializer``...): as Java's
    tools do, those are ignored with a note (on ``notes``, unless it is None) instead of
    refused. Keys given with ``-X`` are still checked: a typo there is an error."""
    from kafka_actors.config import config_keys

    known = set(config_keys()) - _CLASS_KEYS
    ignored = [key for key in properties if key not in known]
    if ignored and notes is not None:
        print(
            f"% {path}: ignored, not consumer settings this client takes: "
            + ", ".join(sorted(ignored)),
            file=notes,
        )
    return {key: value for key, value in properties.items() if key in known}


def build_config(args: argparse.Namespace) -> dict[str, object]:
    """The consumer settings of a command: files, then ``-X``, then ``--bootstrap-servers``."""
    config: dict[str, object] = {}
    notes = None if getattr(args, "quiet", False) else sys.stderr
    for path in args.consumer_config:
        config.update(consumer_settings(path, load_properties(path), notes))
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"-X {item!r}: expected KEY=VALUE")
        config[key.strip()] = value
    if args.bootstrap_servers:
        config["bootstrap.servers"] = args.bootstrap_servers
    return config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kafka_actors",
        description="kafka-actors on the command line: consume, list topics, describe groups.",
        epilog="kcat's mode flags work too: -C = consume, -L = list, -Q = query (e.g. "
        "python -m kafka_actors -b H:P -L -J). "
        "Exit status: 0 done; 1 a Kafka error (an unknown topic, a broker's error); "
        "2 a usage or configuration error; 130 interrupted; 141 the reader of stdout went "
        "away (128 + SIGPIPE, as a shell reports it for kcat).",
    )
    from kafka_actors import __version__

    parser.add_argument(
        "-V",
        "--version",
        action="version",
        version=f"kafka-actors {__version__}",
        help="print the version of kafka-actors and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tokens = ", ".join(f"%{k} {v}" for k, v in FORMAT_TOKENS.items())
    consume = sub.add_parser(
        "consume",
        help="print records of topics (kcat style)",
        description="Print the records of topics, one per line. With --group (and no "
        "--partition) the consumer joins the group, starts at the committed offsets and "
        "commits what it printed; otherwise it reads the partitions without a group. "
        "Records go to stdout; a progress line goes to stderr when stdout is not a terminal.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Offsets (--offset, repeatable; SPEC for every partition or P=SPEC for one):\n"
        "  beginning | end | stored (the group's committed offset) | N (absolute) |\n"
        "  -N (N records before the end) | @TIMESTAMP_MS or s@TIMESTAMP_MS (first record at\n"
        "  or after it).\n"
        "  e@TIMESTAMP_MS: stop each partition at its first record at or after the timestamp\n"
        "  (that record is not printed); the command ends when every partition stopped.\n"
        "  Default: stored in a group, end otherwise. In a group, beginning/end only apply\n"
        "  where nothing is committed (auto.offset.reset).\n"
        f"Format tokens (-f): {tokens};\n  escapes (-f, -D, -K) \\n \\t \\r \\0 \\xNN \\\\.\n"
        "Keys and values are written as their bytes (binary safe); -D/-K give kcat's raw\n"
        "output: key, -K delimiter, value, -D delimiter.\n"
        "Examples:\n"
        "  python -m kafka_actors consume -b H:P -t orders -o @1700000000000 -e -f '%o %s\\n'\n"
        "  python -m kafka_actors consume --consumer-config client.properties -t orders -G g\n",
    )
    _add_config_options(consume, demo=True)
    consume.add_argument(
        "-t",
        "--topic",
        action="append",
        default=None,
        metavar="TOPIC",
        help="a topic to read; may be repeated (default: the demo topic on the embedded cluster)",
    )
    consume.add_argument(
        "--pattern",
        metavar="REGEX",
        help="subscribe to every topic matching REGEX (needs --group; instead of --topic)",
    )
    consume.add_argument(
        "-G", "--group", metavar="GROUP", help="join GROUP (subscribe, commit what is printed)"
    )
    consume.add_argument(
        "-p",
        "--partition",
        type=int,
        action="append",
        default=None,
        metavar="P",
        help="read only partition P of each topic (repeatable); assigns, never subscribes",
    )
    consume.add_argument(
        "-o",
        "--offset",
        action="append",
        default=[],
        metavar="[P=]SPEC",
        help="where to start: SPEC for all partitions, P=SPEC for partition P (see below)",
    )
    consume.add_argument(
        "--from-beginning",
        action="store_true",
        help="same as --offset beginning",
    )
    fmt = consume.add_mutually_exclusive_group()
    fmt.add_argument(
        "-f",
        "--format-string",
        metavar="FMT",
        help="kcat-style output format, e.g. '%%t %%p %%o %%T %%k %%s %%h\\n' (tokens below)",
    )
    fmt.add_argument(
        "--format",
        choices=("text", "jsonl", "value"),
        default=None,
        help="text: topic-partition@offset<TAB>key<TAB>value (default); jsonl: one JSON "
        "object per record (topic, partition, offset, timestamp, timestamp_type, key, value, "
        "headers); value: the value only (kcat's default)",
    )
    fmt.add_argument(
        "-D",
        "--delimiter",
        metavar="DELIM",
        default=None,
        help="raw output, as kcat's: each value followed by DELIM (default \\n; escapes "
        "such as \\0 or \\x1e allowed)",
    )
    consume.add_argument(
        "-K",
        "--key-delimiter",
        metavar="DELIM",
        default=None,
        help="raw output with keys: key, DELIM, value, then the -D delimiter",
    )
    consume.add_argument(
        "-s",
        "--schema",
        dest="serdes",
        action="append",
        default=[],
        metavar="[key=|value=]NAME",
        help="decode keys and/or values through the Schema Registry (-r): avro, json (JSON "
        "Schema) or protobuf; NAME alone for both, as kcat's -s; decoded records print as "
        "JSON text",
    )
    consume.add_argument(
        "-r",
        "--schema-registry",
        metavar="URL",
        default=None,
        help="the Schema Registry's URL, for -s",
    )
    consume.add_argument(
        "--schema-registry-setting",
        dest="registry_settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the Schema Registry client (e.g. basic.auth.user.info=USER:PASS, "
        "ssl.ca.location=FILE); may be repeated",
    )
    consume.add_argument(
        "--bytes",
        choices=("base64", "utf8"),
        default="base64",
        help="how jsonl writes keys, values and header values (default base64)",
    )
    consume.add_argument(
        "--null",
        default="",
        metavar="TEXT",
        help="what a null key or value prints as in text formats (default: nothing)",
    )
    consume.add_argument(
        "-e",
        "--exit",
        action="store_true",
        help="exit once every partition is read to its end (its log end offset, looked at "
        "again when reached)",
    )
    consume.add_argument(
        "-c",
        "--max-records",
        type=int,
        default=None,
        metavar="N",
        help="exit after N records",
    )
    consume.add_argument(
        "--idle-timeout",
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit after SECONDS without a record (default: never)",
    )
    consume.add_argument(
        "--no-commit",
        action="store_true",
        help="in a group, do not commit what was printed",
    )
    consume.add_argument(
        "--group-protocol",
        choices=("consumer", "classic"),
        default=None,
        help="group.protocol (default: the consumer's, consumer = KIP-848)",
    )
    consume.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="the progress line on stderr: auto = when stdout is not a terminal (default)",
    )
    consume.add_argument(
        "--progress-interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how often the progress line is written (default 2)",
    )
    consume.add_argument(
        "--records",
        type=int,
        default=100,
        metavar="N",
        help="demo records to produce (embedded cluster only)",
    )

    lister = sub.add_parser(
        "list",
        help="topics with partitions, leaders, replicas and in-sync replicas",
        description="List topics (internal ones with --internal) with their partitions, "
        "leader, replicas and in-sync replicas, and the cluster's brokers.",
    )
    _add_config_options(lister, demo=True)
    lister.add_argument(
        "-t", "--topic", action="append", default=None, metavar="TOPIC", help="only TOPIC"
    )
    lister.add_argument("--internal", action="store_true", help="include internal topics")
    lister.add_argument(
        "-J",
        "--json",
        action="store_true",
        help="one JSON object: brokers (id, host, port), controller_id, topics (name, topic_id, "
        "internal, partitions with leader, replicas, isr)",
    )
    lister.add_argument(
        "--records", type=int, default=100, metavar="N", help="demo records (embedded only)"
    )

    query = sub.add_parser(
        "query",
        help="offsets for times (kcat -Q): the first offset at or after a timestamp",
        description="For each TOPIC:PARTITION:TIMESTAMP_MS, the offset of the first record "
        "whose timestamp is at or after TIMESTAMP_MS, and that record's timestamp (-1 for "
        "both when every record is older), from the partition's leader (ListOffsets). "
        "An unknown topic or partition is an error (exit 1); nothing is created.",
    )
    _add_config_options(query, demo=False)
    query.add_argument(
        "-t",
        "--topic",
        dest="queries",
        action="append",
        required=True,
        metavar="TOPIC:PARTITION:TIMESTAMP_MS",
        help="a partition and a timestamp in ms (repeatable), as kcat -Q -t takes them",
    )
    query.add_argument(
        "-J", "--json", action="store_true", help="one JSON array of objects instead of a table"
    )

    group = sub.add_parser(
        "group",
        help="describe a group: members, assignments, committed offsets and lag",
        description="Describe a consumer group as kafka-consumer-groups --describe does: one "
        "row per partition the group has assigned or committed (committed offset, log end "
        "offset, lag, owning member), or with --members one row per member. Read-only.",
    )
    _add_config_options(group, demo=False)
    group.add_argument("group", metavar="GROUP", help="the group id")
    group.add_argument(
        "--members", action="store_true", help="one row per member with its assignment"
    )
    group.add_argument(
        "--state", action="store_true", help="the group's state, protocol, assignor, epoch"
    )

    groups = sub.add_parser(
        "groups",
        help="list, describe or delete groups, as kafka-consumer-groups does",
        description="Group administration with kafka-consumer-groups' option names: --list "
        "(every group: type, protocol type, state), --describe --group G (as the group "
        "command), --delete --group G (refused while the group has members).",
    )
    _add_config_options(groups, demo=False)
    action = groups.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="every group of the cluster")
    action.add_argument("--describe", action="store_true", help="describe --group")
    action.add_argument("--delete", action="store_true", help="delete each --group")
    action.add_argument(
        "--delete-offsets",
        action="store_true",
        help="delete the committed offsets of --group for each --topic",
    )
    action.add_argument(
        "--reset-offsets",
        action="store_true",
        help="plan (--dry-run, the default) or --execute a reset of --group on each --topic",
    )
    target = groups.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true", help="reset to the log start")
    target.add_argument("--to-latest", action="store_true", help="reset to the log end")
    target.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    target.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="reset to the first offset at or after this time (UTC unless an offset is given)",
    )
    target.add_argument(
        "--by-duration",
        metavar="PnDTnHnMnS",
        help="reset to the first offset at or after now minus this ISO-8601 duration",
    )
    target.add_argument(
        "--shift-by",
        type=int,
        metavar="N",
        help="move each committed offset by N (negative: back), clamped to the log",
    )
    mode = groups.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (default)")
    mode.add_argument("--execute", action="store_true", help="commit the planned offsets")
    groups.add_argument(
        "--topic",
        dest="topics",
        action="append",
        default=[],
        metavar="TOPIC[:P,P...]",
        help="a topic, or some of its partitions (for --delete-offsets and --reset-offsets)",
    )
    groups.add_argument(
        "--all-topics",
        action="store_true",
        help="with --reset-offsets: every partition the group has a committed offset on",
    )
    groups.add_argument(
        "--group", dest="groups", action="append", default=[], metavar="GROUP", help="a group id"
    )
    groups.add_argument("--members", action="store_true", help="with --describe: members")
    groups.add_argument("--state", action="store_true", help="with --describe: the state")

    probe = sub.add_parser(
        "probe",
        help="ApiVersions, metadata and records of a cluster (protocol layer)",
        description="Print the negotiated ApiVersions, the cluster's metadata and the records "
        "of one topic fetched and decoded by kafka-actors' protocol layer. Plaintext "
        "listeners only. Without --bootstrap-servers it runs on the embedded mock cluster "
        "with demo records; it writes to a cluster you name only with --produce-demo.",
    )
    _add_verbosity_options(probe)
    probe.add_argument(
        "-b",
        "--bootstrap-servers",
        "--bootstrap-server",
        default=None,
        metavar="HOST:PORT[,...]",
        help="a plaintext cluster to probe (default: the embedded mock cluster)",
    )
    probe.add_argument("-t", "--topic", default=_DEMO_TOPIC, help="the topic to read")
    probe.add_argument(
        "--records", type=int, default=100, help="demo records to produce (see --produce-demo)"
    )
    probe.add_argument(
        "--produce-demo",
        action="store_true",
        help="write --records demo records into --topic of the named cluster first",
    )
    return parser


def _formatter(args: argparse.Namespace) -> RecordFormatter:
    if args.key_delimiter is not None and (args.format is not None or args.format_string):
        raise ValueError("-K/--key-delimiter is raw output: it goes with -D, not -f or --format")
    if args.delimiter is not None or args.key_delimiter is not None:
        return RecordFormatter.raw(
            delimiter="\\n" if args.delimiter is None else args.delimiter,
            key_delimiter=args.key_delimiter,
            null=args.null,
        )
    if args.format == "jsonl":
        return RecordFormatter.jsonl(bytes_as=args.bytes)
    if args.format_string is not None:
        return RecordFormatter(args.format_string, null=args.null)
    if args.format == "value":
        return RecordFormatter("%s\\n", null=args.null)
    return RecordFormatter(_TEXT_FORMAT, null=args.null)


class _DecodingSink:
    """Bytes written to a text stream that has no binary buffer (an ``io.StringIO`` in tests):
    decoded as UTF-8, invalid bytes replaced. Real streams are written as bytes."""

    def __init__(self, text: TextIO) -> None:
        self._text = text

    def write(self, data: bytes) -> object:
        return self._text.write(data.decode("utf-8", "replace"))

    def flush(self) -> None:
        self._text.flush()


def binary_sink(out: TextIO) -> ByteSink:
    """Where ``consume`` writes the bytes of records: ``out``'s binary buffer when it has one
    (``sys.stdout.buffer``: keys and values reach the pipe unchanged)."""
    buffer = getattr(out, "buffer", None)
    if buffer is None:
        return _DecodingSink(out)
    out.flush()  # whatever went through the text layer first stays first
    sink: ByteSink = buffer
    return sink


def _consume(args: argparse.Namespace, config: dict[str, object], out: TextIO) -> int:
    from kafka_actors.cli.consume import (
        StartSpec,
        parse_offset_specs,
        parse_stop_specs,
        run_consume,
    )

    default, per_partition = parse_offset_specs(args.offset)
    stop_default, stop_specs = parse_stop_specs(args.offset)
    if args.from_beginning:
        default = StartSpec("beginning")
    if args.group_protocol is not None:
        config["group.protocol"] = args.group_protocol
    if args.serdes or args.schema_registry:
        from kafka_actors.cli import registry

        serdes = registry.parse_serdes(args.serdes)
        if not serdes or not args.schema_registry:
            raise ValueError("-s NAME and -r URL go together (Schema Registry decoding)")
        settings: dict[str, str] = {}
        for item in args.registry_settings:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"--schema-registry-setting {item!r}: expected KEY=VALUE")
            settings[key.strip()] = value
        client = registry.registry_client(args.schema_registry, settings)
        config.update(registry.decoders(serdes, client))
    if args.quiet:
        progress = False
    elif args.progress == "auto":
        progress = not bool(getattr(out, "isatty", lambda: False)())
    else:
        progress = args.progress == "always"
    return run_consume(
        config,
        topics=list(args.topic or []),
        pattern=args.pattern,
        group=args.group,
        partitions=args.partition,
        default_spec=default,
        partition_specs=per_partition,
        stop_default=stop_default,
        stop_specs=stop_specs,
        formatter=_formatter(args),
        exit_at_end=args.exit,
        max_records=args.max_records,
        idle_timeout=args.idle_timeout,
        commit=not args.no_commit,
        progress=progress,
        progress_interval=args.progress_interval,
        out=binary_sink(out),
        err=sys.stderr,
        notes=not args.quiet,
    )


def _embedded(args: argparse.Namespace, run: Any, banner: TextIO | None = None) -> int:
    """Run ``run(bootstrap)`` against the embedded mock cluster with a demo topic (the
    cluster's address goes to ``banner``, default stderr)."""
    from kafka_actors.cli.probe import produce_demo
    from kafka_actors.testing.mock import MockCluster

    topics = list(getattr(args, "topic", None) or [_DEMO_TOPIC])
    with MockCluster(num_brokers=3) as cluster:
        if banner is None:
            if not getattr(args, "quiet", False):
                print(f"% embedded mock cluster at {cluster.bootstrap_servers}", file=sys.stderr)
        else:
            print(f"== embedded mock cluster at {cluster.bootstrap_servers}", file=banner)
        for topic in topics:
            cluster.create_topic(topic, partitions=4)
            produce_demo(cluster.bootstrap_servers, topic, args.records)
        result: int = run(cluster.bootstrap_servers, topics)
        return result


#: kcat's mode flags and the commands they stand for.
_KCAT_MODES = {"-C": "consume", "-L": "list", "-Q": "query"}


def kcat_modes(argv: Sequence[str]) -> list[str]:
    """``argv`` with kcat's mode flag (``-C`` consume, ``-L`` list, ``-Q`` query, anywhere
    in the line, as kcat takes it) turned into the command, so ``-b H:P -L -J`` and
    ``-Q -b H:P -t t:0:TS`` read as kcat users type them. A line that starts with a command
    is left alone."""
    args = list(argv)
    modes = [a for a in args if a in _KCAT_MODES]
    if not modes or (args and args[0] in ("consume", "list", "query", "group", "probe")):
        return args
    if len(set(modes)) > 1:
        raise SystemExit(f"error: one mode at a time, not {' and '.join(sorted(set(modes)))}")
    return [_KCAT_MODES[modes[0]], *[a for a in args if a not in _KCAT_MODES]]


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    args = _parser().parse_args(kcat_modes(sys.argv[1:] if argv is None else argv))
    from kafka_actors.errors import ConfigError, KafkaError

    try:
        return _dispatch(args, stream)
    except BrokenPipeError:
        return _broken_pipe(stream)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return _ISSUES
    except KafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return _FAILED
    except KeyboardInterrupt:
        return 130


def _broken_pipe(stream: TextIO) -> int:
    """The reader of stdout went away (``... | head -1``): end quietly, as kcat and Unix
    tools do, with 128 + SIGPIPE. What is still buffered for stdout cannot be written; stdout
    is pointed at the null device so that the interpreter's last flush raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    return _SIGPIPE


def _dispatch(args: argparse.Namespace, out: TextIO) -> int:
    from kafka_actors.log import configure

    # stdout carries the output only; log lines go to stderr.
    configure(
        level="DEBUG" if args.debug else "ERROR" if args.quiet else "WARNING", stream=sys.stderr
    )
    if args.command == "probe":
        from kafka_actors.cli.probe import probe, produce_demo

        if args.bootstrap_servers:
            if args.produce_demo:
                produce_demo(args.bootstrap_servers, args.topic, args.records)
            return probe(args.bootstrap_servers, args.topic, out)
        return _embedded(
            argparse.Namespace(topic=[args.topic], records=args.records, quiet=args.quiet),
            lambda bootstrap, _topics: probe(bootstrap, args.topic, out),
            banner=out,
        )

    config = build_config(args)
    if args.command == "consume":
        if not config.get("bootstrap.servers"):

            def demo(bootstrap: str, topics: list[str]) -> int:
                config["bootstrap.servers"] = bootstrap
                if args.group is not None and args.partition is None:
                    # librdkafka's mock serves KIP-848 groups subscribed by regex only.
                    args.pattern = "^(" + "|".join(re.escape(t) for t in topics) + ")$"
                    args.topic = None
                    args.group_protocol = "consumer"
                else:
                    args.topic = topics
                if not args.offset and not args.from_beginning:
                    args.from_beginning = True
                if args.idle_timeout is None and args.max_records is None:
                    args.exit = True
                return _consume(args, config, out)

            return _embedded(args, demo)
        if not args.topic and args.pattern is None:
            raise ValueError("consume needs --topic (or --pattern with --group)")
        return _consume(args, config, out)

    from kafka_actors.cli.admin import ClusterClient
    from kafka_actors.config import ConsumerConfig

    if args.command == "list":
        if not config.get("bootstrap.servers"):

            def listing(bootstrap: str, _topics: list[str]) -> int:
                config["bootstrap.servers"] = bootstrap
                return _list(args, config, out)

            return _embedded(args, listing)
        return _list(args, config, out)

    if args.command == "query":
        from kafka_actors.cli.query import parse_query, run_query

        queries = [parse_query(text) for text in args.queries]
        if not config.get("bootstrap.servers"):
            raise ValueError("query needs --bootstrap-servers (or bootstrap.servers)")
        return run_query(config, queries, out, as_json=args.json)

    if args.command == "group":
        if not config.get("bootstrap.servers"):
            raise ValueError("group needs --bootstrap-servers (or bootstrap.servers)")
        from kafka_actors.cli.tables import print_group

        with ClusterClient(ConsumerConfig.from_dict(config)) as client:
            return print_group(
                client,
                args.group,
                out,
                members=args.members,
                state=args.state,
                notes=None if args.quiet else sys.stderr,
            )
    if args.command == "groups":
        if not config.get("bootstrap.servers"):
            raise ValueError("groups needs --bootstrap-servers (or bootstrap.servers)")
        return _groups(args, config, out)
    return _ISSUES


def _groups(args: argparse.Namespace, config: dict[str, object], out: TextIO) -> int:
    from kafka_actors.admin import AdminClient
    from kafka_actors.cli.tables import format_table, print_group
    from kafka_actors.config import ConsumerConfig

    if not args.list and not args.groups:
        raise ValueError("--describe and --delete need --group")
    with AdminClient(ConsumerConfig.from_dict(config)) as admin:
        if args.list:
            rows = [
                (g.group_id, g.group_type or "-", g.protocol_type or "-", g.state or "-")
                for g in admin.list_groups()
            ]
            out.write(format_table(("GROUP", "TYPE", "PROTOCOL-TYPE", "STATE"), rows))
            return 0
        if args.describe:
            for group in args.groups:
                code = print_group(
                    admin.cluster, group, out, members=args.members, state=args.state,
                    notes=None if args.quiet else sys.stderr,
                )  # fmt: skip
                if code:
                    return code
            return 0
        if args.delete_offsets:
            return _delete_offsets(admin, args.groups, args.topics, out)
        if args.reset_offsets:
            return _reset_offsets(admin, args, out)
        outcome = admin.delete_groups(args.groups)
        failed = {g: e for g, e in outcome.items() if e is not None}
        deleted = [g for g, e in outcome.items() if e is None]
        if deleted:
            names = ", ".join(f"'{g}'" for g in deleted)
            out.write(f"Deletion of requested consumer groups ({names}) was successful.\n")
        for group, error in failed.items():
            out.write(f"Group '{group}' could not be deleted: {error}\n")
        return 1 if failed else 0


def datetime_ms(text: str) -> int:
    """``--to-datetime``: ``YYYY-MM-DDTHH:mm:SS[.sss]`` (UTC) or with an offset, in ms."""
    import datetime as dt

    moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def duration_ms(text: str) -> int:
    """``--by-duration``: an ISO-8601 duration ``PnDTnHnMn.nS`` in ms."""
    match = re.fullmatch(
        r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", text.upper()
    )
    if match is None or text.upper() in ("P", "PT"):
        raise ValueError(f"--by-duration {text!r}: an ISO-8601 duration such as PT1H30M")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _partitions_of(admin: Any, topics: list[str]) -> list[Any]:
    """``--topic T`` (every partition) or ``T:P,P`` as TopicPartitions."""
    from kafka_actors.protocol.messages import TopicPartition

    partitions: list[TopicPartition] = []
    for spec in topics:
        name, _, indexes = spec.partition(":")
        if indexes:
            partitions += [TopicPartition(name, int(p)) for p in indexes.split(",")]
        else:
            [described] = admin.cluster.topics([name])
            partitions += [TopicPartition(name, p[0]) for p in described.partitions]
    return partitions


def _reset_offsets(admin: Any, args: argparse.Namespace, out: TextIO) -> int:
    """``groups --reset-offsets``: the plan as kafka-consumer-groups prints it, committed
    only with ``--execute``."""
    from kafka_actors.cli.tables import format_table

    if len(args.groups) != 1 or not (args.topics or args.all_topics):
        raise ValueError("--reset-offsets needs one --group and --topic or --all-topics")
    if args.topics and args.all_topics:
        raise ValueError("--reset-offsets takes --topic or --all-topics, not both")
    to: str | int
    if args.to_earliest:
        to = "earliest"
    elif args.to_latest:
        to = "latest"
    elif args.to_offset is not None:
        to = args.to_offset
    elif args.to_datetime is not None or args.by_duration is not None:
        to = "timestamp"
    elif args.shift_by is not None:
        to = "shift"
    else:
        raise ValueError(
            "--reset-offsets needs --to-earliest, --to-latest, --to-offset, --to-datetime, "
            "--by-duration or --shift-by"
        )
    timestamp_ms: int | None = None
    if args.to_datetime is not None:
        timestamp_ms = datetime_ms(args.to_datetime)
    elif args.by_duration is not None:
        timestamp_ms = int(time.time() * 1000) - duration_ms(args.by_duration)
    [group] = args.groups
    committed = admin.committed_offsets(group)
    partitions = sorted(committed) if args.all_topics else _partitions_of(admin, args.topics)
    plan = admin.plan_reset(
        group,
        partitions,
        to=to,
        timestamp_ms=timestamp_ms,
        shift_by=args.shift_by,
        committed=committed,
    )
    if args.execute:
        admin.alter_group_offsets(group, {r.partition: r.target for r in plan})
    rows = [(group, r.partition.topic, r.partition.partition, r.target) for r in plan]
    out.write(format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows))
    return 0


def _delete_offsets(admin: Any, groups: list[str], topics: list[str], out: TextIO) -> int:
    """``groups --delete-offsets``: one row per partition, ``Successful`` or the error."""
    from kafka_actors.cli.tables import format_table

    if len(groups) != 1 or not topics:
        raise ValueError("--delete-offsets needs one --group and at least one --topic")
    outcome = admin.delete_group_offsets(groups[0], _partitions_of(admin, topics))
    rows = [
        (tp.topic, tp.partition, "Successful" if error is None else f"Error: {error}")
        for tp, error in sorted(outcome.items())
    ]
    out.write(format_table(("TOPIC", "PARTITION", "STATUS"), rows))
    return 1 if any(error is not None for error in outcome.values()) else 0


def _list(args: argparse.Namespace, config: dict[str, object], out: TextIO) -> int:
    from kafka_actors.cli.admin import ClusterClient
    from kafka_actors.cli.tables import print_topics
    from kafka_actors.config import ConsumerConfig

    with ClusterClient(ConsumerConfig.from_dict(config)) as client:
        return print_topics(
            client, out, topics=args.topic, internal=args.internal, as_json=args.json
        )
