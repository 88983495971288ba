"""Typed users' view of the package (issue 25): ``mypy --strict`` (with the project's own mypy
configuration) over a snippet that builds consumers as the docs do, asserting what a type
checker infers for a record's key and value (``reveal_type``), and over every ``python`` code
block of the README and of ``docs/``.

The snippet below marks each ``reveal_type`` line with ``# expect: <revealed type>`` and each
line that must be refused with ``# error: <message start>``; any other error fails. mypy runs
once for the module (one process, the cache shared with the project's own mypy run).

The docs' blocks are checked one at a time, each as a file of its own; the blocks of a page
marked ``<!-- run -->`` (they run in one namespace, ``tests/docs/test_docs_snippets.py``) as one
file, in order. A block may use names the text around it introduces (``consumer``: a consumer
built earlier on the page): the page declares them, invisibly when rendered, in an HTML comment
``<!-- typecheck: context`` ... ``-->`` holding Python statements; a block gets the context's
imports and the statements that bind a name it uses without defining it. A block that cannot
be checked at all is preceded by ``<!-- typecheck: skip (the reason) -->``; keep those few.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """\
from __future__ import annotations

import json
from typing import Any, reveal_type

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import IntegerDeserializer, StringDeserializer

from kafka_actors import (
    AsyncKafkaConsumer,
    AsyncKafkaShareConsumer,
    ConsumerRecord,
    KafkaConsumer,
    KafkaShareConsumer,
    ParallelConsumer,
)
from kafka_actors.pykka import StreamSubscriber
from kafka_actors.serialization import ContextDeserializer, DeserializationContext, with_context

config = {"bootstrap.servers": "localhost:9092", "group.id": "g"}


def text_values() -> None:
    with KafkaConsumer(config, value_deserializer=bytes.decode) as consumer:
        reveal_type(consumer)  # expect: kafka_actors.consumer.KafkaConsumer[bytes | None, str]
        for record in consumer.poll(1.0):
            reveal_type(record.value)  # expect: str
            reveal_type(record.key)  # expect: bytes | None
            record.value.decode()  # error: "str" has no attribute "decode"


def json_values() -> None:
    consumer = KafkaConsumer(config, key_deserializer=bytes.decode, value_deserializer=json.loads)
    for record in consumer.poll(1.0):
        reveal_type(record.value)  # expect: Any
        reveal_type(record.key)  # expect: str


def no_deserializer() -> None:
    consumer = KafkaConsumer(config)
    reveal_type(consumer)  # expect: kafka_actors.consumer.KafkaConsumer[bytes | None, bytes | None]
    for record in consumer.poll(1.0):
        reveal_type(record.value)  # expect: bytes | None
        reveal_type(record.key)  # expect: bytes | None


def confluent_deserializers() -> None:
    consumer = KafkaConsumer(
        config, key_deserializer=IntegerDeserializer(), value_deserializer=StringDeserializer()
    )
    for record in consumer.poll(1.0):
        reveal_type(record.key)  # expect: int | None
        reveal_type(record.value)  # expect: str | None
    registry = SchemaRegistryClient({"url": "http://localhost:8081"})
    avro = KafkaConsumer(config, value_deserializer=AvroDeserializer(registry))
    for avro_record in avro.poll(1.0):
        reveal_type(avro_record.value)  # expect: Any


def tagged(data: bytes | None, ctx: DeserializationContext) -> tuple[str, int]:
    return ctx.topic, len(data or b"")


class Lengths(ContextDeserializer[int]):
    def __call__(self, data: bytes | None, ctx: DeserializationContext) -> int:
        return len(data or b"")


class JavaStyle:
    def deserialize(self, topic: str, headers: Any, data: bytes | None) -> float:
        return float(len(data or b""))


def other_kinds() -> None:
    consumer = KafkaConsumer(
        config, key_deserializer=Lengths(), value_deserializer=with_context(tagged)
    )
    for record in consumer.poll(1.0):
        reveal_type(record.key)  # expect: int
        reveal_type(record.value)  # expect: tuple[str, int]
    java = KafkaConsumer(config, value_deserializer=JavaStyle())
    for java_record in java.poll(1.0):
        reveal_type(java_record.value)  # expect: float


def annotated(consumer: KafkaConsumer[str, dict[str, Any]]) -> None:
    for record in consumer.poll(1.0):
        reveal_type(record.value)  # expect: dict[str, Any]
    configured: KafkaConsumer[str, float] = KafkaConsumer({"value.deserializer": float})
    reveal_type(configured)  # expect: kafka_actors.consumer.KafkaConsumer[str, float]


async def asynchronous() -> None:
    async with AsyncKafkaConsumer("t", config=config, value_deserializer=bytes.decode) as consumer:
        async for record in consumer:
            reveal_type(record.value)  # expect: str
        batch = await consumer.getmany(timeout_ms=100)
        for records in batch.values():
            reveal_type(records[0].value)  # expect: str
        one = await consumer.getone()
        reveal_type(one.key)  # expect: bytes | None


def share() -> None:
    with KafkaShareConsumer(config, value_deserializer=bytes.decode) as consumer:
        for record in consumer.poll(1.0):
            reveal_type(record.value)  # expect: str
            consumer.acknowledge(record)


async def share_async() -> None:
    async with AsyncKafkaShareConsumer(config, value_deserializer=json.loads) as consumer:
        async for record in consumer:
            reveal_type(record.value)  # expect: Any


class Views(StreamSubscriber):
    # A bridge's records are deserialized by its config's deserializers: typed as the
    # subscriber knows them.

    def process(self, records: tuple[ConsumerRecord[str, str], ...]) -> None:
        for record in records:
            reveal_type(record.value)  # expect: str


def raw_handler(record: ConsumerRecord) -> None:
    reveal_type(record.value)  # expect: bytes | None


def text_handler(record: ConsumerRecord[str, str]) -> None: ...


def parallel() -> None:
    # A ParallelConsumer has no deserializers (its dead letters and key order take the raw
    # bytes): its handlers get records as decoded.
    ParallelConsumer(config, handler=raw_handler)
    ParallelConsumer(config, handler=text_handler)  # error: Argument "handler"


def refused() -> None:
    consumer = KafkaConsumer(config, value_deserializer=bytes.decode)
    for record in consumer.poll(1.0):
        typed: ConsumerRecord[str, str] = record  # error: Incompatible types in assignment
        print(typed)
    KafkaConsumer(config, value_deserializer=str.upper)  # error: Argument "value_deserializer"
"""

_SKIP = "<!-- typecheck: skip"
_RUN = "<!-- run -->"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_CONTEXT = re.compile(r"<!-- typecheck: context\n(.*?)-->", re.S)


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the block's first code line in the page
    code: str
    skipped: bool
    run: bool  # marked <!-- run -->: the page's marked blocks run in one namespace


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def doc_blocks(page: Path | None = None) -> list[Block]:
    out: list[Block] = []
    for path in doc_pages() if page is None else [page]:
        text = path.read_text()
        for m in _BLOCK.finditer(text):
            before = text[: m.start()].rstrip().rsplit("\n", 1)[-1]
            out.append(
                Block(
                    page=str(path.relative_to(ROOT)),
                    line=text.count("\n", 0, m.start(1)) + 1,
                    code=m.group(1),
                    skipped=before.startswith(_SKIP),
                    run=before.startswith(_RUN),
                )
            )
    return out


def _bound(node: ast.AST) -> set[str]:
    names: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(n.name)
        elif isinstance(n, ast.alias):
            names.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
    return names


def _names(code: str) -> tuple[set[str], set[str]]:
    """The names ``code`` reads (builtins aside), and those it defines with ``def``,
    ``class`` or ``import``."""
    tree = ast.parse(code)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    defined = {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    } | {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    return read - set(dir(builtins)), defined


def context_for(code: str, context: str) -> str:
    """The statements of a page's context (its ``<!-- typecheck: context ... -->`` comments)
    that ``code`` needs: its imports, and those binding a name ``code`` reads and does not
    define with ``def``, ``class`` or ``import`` itself (assigning it is fine: the context
    declares its type)."""
    read, defined = _names(code)
    needed = read - defined
    wanted = [
        ast.get_source_segment(context, stmt) or ""
        for stmt in ast.parse(context).body
        if isinstance(stmt, ast.Import | ast.ImportFrom) or _bound(stmt) & needed
    ]
    return "\n".join(["from typing import Any", *wanted]) + "\n"


@dataclass
class Unit:
    """One file mypy checks for the docs: a block (or a page's run blocks, in order) after
    the context it needs; ``lines[i]`` is the page line of the file's line ``i + 1`` (None for
    context lines)."""

    page: str
    text: str = ""
    lines: list[int | None] = field(default_factory=list)

    def add(self, code: str, first_line: int | None) -> None:
        n = code.count("\n")
        self.text += code
        self.lines += [None] * n if first_line is None else list(range(first_line, first_line + n))


def doc_units() -> list[Unit]:
    units: list[Unit] = []
    for path in doc_pages():
        blocks = [b for b in doc_blocks(path) if not b.skipped]
        if not blocks:
            continue
        context = "\n".join(_CONTEXT.findall(path.read_text()))
        run = [b for b in blocks if b.run]
        groups = [[b] for b in blocks if not b.run] + ([run] if run else [])
        for group in groups:
            unit = Unit(group[0].page)
            unit.add(context_for("".join(b.code for b in group), context), None)
            for b in group:
                unit.add(b.code, b.line)
            units.append(unit)
    return units


@dataclass(frozen=True)
class Checked:
    """mypy's output lines per checked file name, and the docs unit behind each docs file."""

    lines: dict[str, list[str]]
    units: dict[str, Unit]
    report: str


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Checked:
    work = tmp_path_factory.mktemp("typing")
    (work / "snippet.py").write_text(SNIPPET)
    files = [str(work / "snippet.py")]
    units: dict[str, Unit] = {}
    for i, unit in enumerate(doc_units()):
        stem = re.sub(r"\W", "_", unit.page.removesuffix(".md").lower())
        name = f"doc_{stem}_{i}.py"
        (work / name).write_text(unit.text)
        files.append(str(work / name))
        units[name] = unit
    stdout, stderr, _ = mypy_api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--strict",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "--no-error-summary",
            "--hide-error-context",
            "--show-absolute-path",
            *files,
        ]
    )
    assert not stderr.strip(), stderr
    lines: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        path = line.split(":", 1)[0]
        lines.setdefault(Path(path).name, []).append(line)
    return Checked(lines, units, stdout)


def _expectations(marker: str) -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(SNIPPET.splitlines(), 1):
        if f"# {marker}: " in line:
            out.append((number, line.split(f"# {marker}: ", 1)[1].strip()))
    return out


_LINE = re.compile(r"^[^:]+:(\d+): (note|error): (.*)$")


def _snippet_messages(checked: Checked, kind: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for line in checked.lines.get("snippet.py", []):
        m = _LINE.match(line)
        if m and m.group(2) == kind:
            out[int(m.group(1))] = m.group(3)
    return out


@pytest.mark.parametrize(
    ("line", "expected"), _expectations("expect"), ids=[e for _, e in _expectations("expect")]
)
def test_revealed_type(checked: Checked, line: int, expected: str) -> None:
    notes = _snippet_messages(checked, "note")
    source = SNIPPET.splitlines()[line - 1].strip()
    assert line in notes, f"no reveal_type on line {line}: {source}\n{checked.report}"
    revealed = notes[line].removeprefix("Revealed type is ").strip('"')
    assert revealed.replace("builtins.", "") == expected, source


def test_only_the_marked_lines_are_refused(checked: Checked) -> None:
    errors = _snippet_messages(checked, "error")
    wanted = dict(_expectations("error"))
    for line, start in wanted.items():
        assert line in errors, f"line {line} type-checks: {SNIPPET.splitlines()[line - 1]}"
        assert errors[line].startswith(start), errors[line]
    unexpected = {n: e for n, e in errors.items() if n not in wanted}
    assert not unexpected, unexpected


def _errors(checked: Checked, page: str) -> list[str]:
    problems = []
    for name, unit in checked.units.items():
        if unit.page != page:
            continue
        for line in checked.lines.get(name, []):
            m = _LINE.match(line)
            if m is None or m.group(2) != "error":
                continue
            at = unit.lines[int(m.group(1)) - 1]
            where = f"{page}:{at}" if at is not None else f"{page} (its typecheck context)"
            problems.append(f"{where}: {m.group(3)}")
    return problems


def test_the_readme_consumer_type_checks(checked: Checked) -> None:
    readme = doc_blocks(ROOT / "README.md")
    assert any("value_deserializer=bytes.decode" in b.code for b in readme)
    assert all(not b.skipped for b in readme), "the README's blocks are all checked"
    assert any(u.page == "README.md" for u in checked.units.values())
    problems = _errors(checked, "README.md")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", sorted({b.page for b in doc_blocks()}))
def test_docs_code_blocks_type_check(checked: Checked, page: str) -> None:
    problems = _errors(checked, page)
    assert not problems, "\n".join(problems)


def test_few_blocks_are_skipped() -> None:
    blocks = doc_blocks()
    skipped = [f"{b.page}:{b.line}" for b in blocks if b.skipped]
    assert len(blocks) >= 30
    assert len(skipped) <= 3, skipped
