"""The routing table covers every event: each event class a request manager publishes (found
by reading ``kafka_actors/protocol/**/*.py``), each event an actor builds for another, has a row in
:data:`~kafka_actors.actors.routing.ROUTES`; an event without a row is reported at error, not
dropped in silence."""

from __future__ import annotations

import ast
import importlib
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kafka_actors
from kafka_actors.actors import managers
from kafka_actors.actors.routing import ACTORS, CALLER, POLLER, ROUTES, To, route_of
from kafka_actors.log import get_logger
from kafka_actors.testing import capture_logs

PACKAGE = Path(kafka_actors.__file__).parent
MANAGER_ACTORS: tuple[Any, ...] = tuple(
    getattr(managers, name) for name in managers.__all__ if name.endswith("Actor")
)


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _built_classes(node: ast.expr, function: ast.AST | None) -> list[str]:
    """Class names ``node`` is built from: ``X(...)``, or a local variable assigned ``X(...)``
    in the same function."""
    if isinstance(node, ast.Call):
        name = _name(node.func)
        return [name] if name is not None else []
    if isinstance(node, ast.Name) and function is not None:
        names: list[str] = []
        for sub in ast.walk(function):
            if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Call):
                if any(isinstance(t, ast.Name) and t.id == node.id for t in sub.targets):
                    names += _built_classes(sub.value, None)
        return names
    return []


def _calls(path: Path) -> list[tuple[ast.Call, ast.AST | None]]:
    tree = ast.parse(path.read_text())
    found: list[tuple[ast.Call, ast.AST | None]] = []

    def visit(node: ast.AST, function: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            if isinstance(child, ast.Call):
                found.append((child, inner))
            visit(child, inner)

    visit(tree, None)
    return found


def _module_of(path: Path) -> Any:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    return importlib.import_module(".".join(relative.parts))


#: protocol modules whose state machines are not request managers: the per-node connection
#: (``NodeConnection``) reports its events to the NetworkActor that drives it, nothing routes them
NOT_MANAGERS = frozenset({"connection"})


def published_by_managers() -> dict[type, str]:
    """Every event class a pure manager puts in its outbox (``self._events.append(X(...))``
    and the like: a call of append/publish/emit/put on something named *event* or *outbox*),
    with where it is published."""
    classes: dict[type, str] = {}
    for path in sorted((PACKAGE / "protocol").rglob("*.py")):
        if path.relative_to(PACKAGE / "protocol").parts[0] in NOT_MANAGERS:
            continue
        module = _module_of(path)
        for call, function in _calls(path):
            if not isinstance(call.func, ast.Attribute) or not call.args:
                continue
            if call.func.attr not in {"append", "appendleft", "publish", "emit", "put", "add"}:
                continue
            owner = (_name(call.func.value) or "").lower()
            if "event" not in owner and "outbox" not in owner:
                continue
            for name in _built_classes(call.args[0], function):
                cls = getattr(module, name, None)
                if isinstance(cls, type):
                    classes[cls] = f"{path.name}:{call.lineno}"
    return classes


def sent_by_actors() -> dict[tuple[type, str | None], str]:
    """Every event an actor routes (``self.route(X(...))``) or emits to a named actor
    (``self.emit("target", X(...))``) of its own, with the target (None: routed)."""
    found: dict[tuple[type, str | None], str] = {}
    paths = sorted((PACKAGE / "actors").glob("*.py")) + sorted(
        (PACKAGE / "actors" / "managers").glob("*.py")
    )
    for path in paths:
        module = _module_of(path)
        for call, function in _calls(path):
            if not isinstance(call.func, ast.Attribute) or _name(call.func.value) != "self":
                continue
            if call.func.attr == "route" and call.args:
                target, built = None, call.args[0]
            elif call.func.attr == "emit" and len(call.args) == 2:
                first = call.args[0]
                target = first.value if isinstance(first, ast.Constant) else "?"
                built = call.args[1]
            else:
                continue
            for name in _built_classes(built, function):
                cls = getattr(module, name, None)
                if isinstance(cls, type):
                    found[(cls, target)] = f"{path.name}:{call.lineno}"
    return found


def test_every_event_a_manager_publishes_has_a_route() -> None:
    published = published_by_managers()
    # The scan itself must keep working: today the managers publish 29 event classes.
    assert len(published) >= 25, sorted(c.__name__ for c in published)
    missing = {cls.__name__: where for cls, where in published.items() if route_of(cls) is None}
    assert missing == {}, f"events without a row in routing.ROUTES: {missing}"


def test_every_event_an_actor_sends_of_its_own_is_in_the_table() -> None:
    sent = sent_by_actors()
    assert sent, "the scan found no route()/emit() call with a built event"
    for (cls, target), where in sent.items():
        steps = route_of(cls)
        assert steps is not None, f"{cls.__name__} ({where}) has no row in routing.ROUTES"
        if target is not None:
            assert target in steps, f"{where}: emit({target!r}, {cls.__name__}) not in its row"


def test_every_row_is_an_event_someone_sends() -> None:
    sent = set(published_by_managers()) | {cls for cls, _ in sent_by_actors()}
    stale = sorted(kind.__name__ for kind in ROUTES if kind not in sent)
    assert stale == [], f"rows for events nobody publishes any more: {stale}"


def test_the_table_names_real_actors_and_steps() -> None:
    assert len(MANAGER_ACTORS) == 6
    components = {cls.component for cls in MANAGER_ACTORS}
    assert components | {"facade"} == set(ACTORS)
    for kind, steps in ROUTES.items():
        for step in steps:
            if isinstance(step, str):
                assert step in ACTORS, (kind.__name__, step)
            elif isinstance(step, To):
                assert step.actor in ACTORS, (kind.__name__, step.actor)
            else:
                assert step is CALLER or step is POLLER, (kind.__name__, step)


def test_a_manager_actor_never_emits_around_the_table() -> None:
    """The manager actors send their events with route() only; emit() is the table's own
    primitive (base.py's BackgroundError is checked against its row above)."""
    direct = [
        f"{path.name}:{call.lineno}"
        for path in sorted((PACKAGE / "actors" / "managers").glob("*.py"))
        for call, _ in _calls(path)
        if isinstance(call.func, ast.Attribute)
        and call.func.attr == "emit"
        and _name(call.func.value) == "self"
    ]
    assert direct == []


def test_every_target_receives_what_the_table_sends_it() -> None:
    """A manager actor named in a row has a receiver (or an explicit None: just poll) for the
    event it gets there (the row's event, or what ``To.make`` builds)."""
    by_component = {cls.component: cls for cls in MANAGER_ACTORS}
    unhandled: list[str] = []
    for kind, steps in ROUTES.items():
        for step in steps:
            if isinstance(step, str):
                target, delivered = step, kind
            elif isinstance(step, To):
                target = step.actor
                delivered = typing.get_type_hints(step.make)["return"] if step.make else kind
            else:
                continue
            actor = by_component.get(target)
            if actor is None:
                continue  # the facade takes background events in facade.py
            if not any(c in actor.receivers for c in delivered.__mro__):
                unhandled.append(f"{kind.__name__} -> {target} ({delivered.__name__})")
    assert unhandled == []


def test_receivers_take_only_what_the_table_sends() -> None:
    sent: set[tuple[str, type]] = set()
    for kind, steps in ROUTES.items():
        for step in steps:
            if isinstance(step, str):
                sent.add((step, kind))
            elif isinstance(step, To):
                made = typing.get_type_hints(step.make)["return"] if step.make else kind
                sent.add((step.actor, made))
    extra = [
        f"{cls.component}: {kind.__name__}"
        for cls in MANAGER_ACTORS
        for kind in cls.receivers
        if (cls.component, kind) not in sent
    ]
    assert extra == []


def test_a_routed_event_the_target_has_no_receiver_for_is_reported() -> None:
    for cls in MANAGER_ACTORS:
        actor = object.__new__(cls)
        actor.log = get_logger(cls.component)
        with capture_logs() as logs:
            actor.receive(_Unknown(), 0)
        assert [(e["event"], e["log_level"], e["target"]) for e in logs] == [
            ("routed_event_not_received", "error", cls.component)
        ]


class _Unknown:
    """An event nobody routes."""


def test_an_event_without_a_route_is_reported_at_error() -> None:
    sent: list[Any] = []
    for cls in MANAGER_ACTORS:
        actor = object.__new__(cls)
        actor.ctx = SimpleNamespace(
            tell=lambda name, message: sent.append((name, message)),
            signal=SimpleNamespace(notify=lambda: sent.append("poller")),
        )
        actor.log = get_logger(cls.component)
        with capture_logs() as logs:
            actor.route(_Unknown())
        assert [
            (entry["event"], entry["log_level"], entry["kind"], entry["source"]) for entry in logs
        ] == [("event_not_routed", "error", "_Unknown", cls.component)]
    assert sent == []
