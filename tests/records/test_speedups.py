"""kafka_actors.speedups: the optional mypyc build of the record decoder is the same code,
used only when built from the current source, and can be turned off."""

from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kafka_actors import speedups
from kafka_actors.errors import CorruptRecordError
from kafka_actors.protocol import records
from kafka_actors.protocol.record_builder import RecordSpec, build_batch
from kafka_actors.protocol.records import CompressionType

SOURCE = Path(records.__file__)
BUILT = speedups._compiled_path() is not None


def _pure_records() -> types.ModuleType:
    """records.py loaded under another name: its accelerate hook does not run."""
    spec = importlib.util.spec_from_file_location("records_pure_for_test", SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it runs
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def _fake(path: Path) -> types.ModuleType:
    module = types.ModuleType("fake_records")
    module.__file__ = str(path)
    module.__all__ = list(records.__all__)  # type: ignore[attr-defined]
    return module


def test_implementation_is_reported() -> None:
    assert records.IMPLEMENTATION in ("python", "mypyc")
    if records.IMPLEMENTATION == "mypyc":
        assert BUILT and not speedups._pure_forced()


def test_records_pickle_by_their_public_module() -> None:
    record = records.ConsumerRecord(
        "t", 0, 5, 1000, records.TimestampType.CREATE_TIME, b"k", b"v", (), None
    )
    assert type(record).__module__ == "kafka_actors.protocol.records"
    assert pickle.loads(pickle.dumps(record)) == record


def test_environment_forces_pure_python() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import kafka_actors.protocol.records as r; print(r.IMPLEMENTATION)",
        ],
        env={**os.environ, speedups.PURE_ENV: "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "python"


@pytest.mark.skipif(not BUILT, reason="no speedups build (python -m kafka_actors.speedups build)")
def test_a_build_of_other_source_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(speedups.PURE_ENV, raising=False)
    same = tmp_path / "records.py"
    same.write_bytes(SOURCE.read_bytes())
    changed = tmp_path / "records_changed.py"
    changed.write_bytes(SOURCE.read_bytes() + b"\n# edited\n")
    current, stale = _fake(same), _fake(changed)
    assert speedups.accelerate(current) is True
    assert current.IMPLEMENTATION == "mypyc"
    assert speedups.accelerate(stale) is False
    assert not hasattr(stale, "IMPLEMENTATION")
    monkeypatch.setenv(speedups.PURE_ENV, "1")
    assert speedups.accelerate(_fake(same)) is False


@pytest.mark.skipif(not BUILT, reason="no speedups build (python -m kafka_actors.speedups build)")
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_build_decodes_like_the_pure_module(
    codec: CompressionType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(speedups.PURE_ENV, raising=False)
    compiled = _fake(SOURCE)
    assert speedups.accelerate(compiled)
    pure = _pure_records()
    specs = [
        RecordSpec(
            key=b"k%d" % i if i % 3 else None,
            value=b"v" * (i % 300),
            timestamp=1000 + i,
            headers=(("h", b"%d" % i),) if i % 2 else (),
        )
        for i in range(700)
    ]
    data = b"".join(
        build_batch(specs[s : s + 100], base_offset=s, compression=codec)
        for s in range(0, len(specs), 100)
    )
    a = compiled.decode_records(data, "t", 0, fetch_offset=150)
    b = pure.decode_records(data, "t", 0, fetch_offset=150)
    assert a.offsets == b.offsets and a.keys == b.keys and a.values == b.values
    assert a.timestamps == b.timestamps and a.headers == b.headers
    assert a.next_fetch_offset == b.next_fetch_offset == 700
    assert [tuple(r) for r in a] == [tuple(r) for r in b]
    with pytest.raises(CorruptRecordError):
        compiled.decode_records(data[:-3] + b"\xff\xff\xff", "t", 0)
