"""The code blocks of the share-groups guide (``docs/guides/share-groups.md``) marked
``<!-- run -->`` run as they are, in order, in one namespace, against a real Kafka 4.x broker
with share groups (the ``share_broker`` fixture), as a reader would run them: the namespace
holds the three names the guide asks the reader to set (``bootstrap``, ``topic``, ``group``),
and a few records are produced before each block. Without a broker, the blocks must still
compile and import only names the package has."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from typing import Any

import pytest

from tests.docs.test_docs_snippets import runnable_blocks

PAGE = "guides/share-groups.md"


def test_the_blocks_compile_and_import_real_names() -> None:
    blocks = runnable_blocks(PAGE)
    assert len(blocks) >= 4, f"{PAGE}: expected marked blocks, found {len(blocks)}"
    for i, code in enumerate(blocks):
        tree = ast.parse(code, f"{PAGE}[block {i}]")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kafka_actors"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert hasattr(module, alias.name), f"block {i}: {node.module}.{alias.name}"


@pytest.mark.broker
def test_the_marked_blocks_run_on_a_share_broker(
    share_broker: Any, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    pytest.importorskip("confluent_kafka")
    from tests.share.helpers import produce

    topic = kafka_topic(share_broker)
    group = share_group()  # share.auto.offset.reset=earliest
    namespace: dict[str, Any] = {
        "__name__": "docs_share_groups",
        "bootstrap": share_broker.bootstrap_servers,
        "topic": topic,
        "group": group,
    }
    for i, code in enumerate(runnable_blocks(PAGE)):
        produce(share_broker.bootstrap_servers, topic, 3, start=3 * i)
        exec(compile(code, f"{PAGE}[block {i}]", "exec"), namespace)
    assert namespace["handled"], "the implicit example handled records"
    assert namespace["settled"] > 0, "the explicit example settled records"
    assert namespace["results"], "the callback reported acknowledgements"
    assert all(error is None for _, _, error in namespace["results"])
