"""The actor runtime: every use kafka-actors makes of pykka beyond its public API.

Owns: :class:`RuntimeActor`, the base of every actor in a supervision tree
(:class:`~kafka_actors.supervisors.SupervisedActor` derives from it), which turns the pykka
internals we depend on into hooks with public names of our own; :func:`envelope` (a message as
the inbox carries it); :class:`FirstWinsFuture` and :data:`AlreadySet` (what a future raises
when completed twice). May touch: pykka, including its private names; nothing of kafka-actors.
No other module may use a private name of pykka (``pykka._...``, ``_handle_receive``,
``_handle_failure``, ``_actor_loop``, ``_create_actor_inbox``, ``_create_future``,
``_ActorStop``, envelopes): ``tests/runtime/test_pykka_contract.py`` pins what this module
relies on against the installed pykka, so an upgrade that changes any of it fails there, by
name, instead of somewhere in the consumer.

Why a boxed pykka and not a runtime of our own
----------------------------------------------
Issue #11 offered two ways out of depending on pykka's internals in three modules: (a) keep
pykka and box every private use in one module with a contract test, or (b) write our own small
actor runtime (we already own supervision, the scheduler and futures), keeping pykka only
where services embed us. We chose (a), because:

* what we need beyond pykka's public API is small: a custom inbox, a hook before each
  message, one on each failure pykka handles, one for the messages left at stop, one when the
  thread ends, the reply-future class, and the envelope and stop-message types. Each maps onto
  one private pykka method or type, all in this module, each pinned by the contract test;
* a runtime of our own would re-implement what pykka already does and the rest of the code
  relies on: ``ask``/``tell`` and their futures, the registry, proxies (tests use them),
  and pykka's failure semantics for ``on_start``/``on_receive``/``on_stop``, which
  :mod:`kafka_actors.supervisors.supervisor` documents and builds on; all of it threaded
  code whose bugs pykka has already found and fixed, and which we would have to find again;
* the card names pykka as the embedding API for services: their actors talk to ours through
  ``pykka.ActorRef``. With (b) those refs would be an adapter over a second runtime;
* moving to pykka 5 now means changing this file (and its pin in ``pyproject.toml``), with the
  contract test saying which assumption broke.

The pykka 4.x facts relied on (checked against pykka 4.5 source; the contract test pins each):

* ``Actor.__init__`` calls ``self._create_actor_inbox()`` for the inbox; the actor loop blocks
  in ``inbox.get()`` and expects an envelope (``.message``, ``.reply_to``); ``tell`` puts
  ``Envelope(message)`` and ``ask`` puts ``Envelope(message, reply_to=future)`` with the future
  made by the actor class's ``_create_future()``.
* Every message, stops and proxy calls included, goes through ``_handle_receive``;
  ``actor_ref.stop()`` sends a ``pykka.messages._ActorStop`` through it, which runs ``on_stop``.
* ``_handle_failure`` is called for an exception in ``on_start`` (then neither ``on_failure``
  nor ``on_stop`` runs), in ``on_receive`` for a ``tell`` (then ``on_failure``), in ``on_stop``
  and in ``on_failure``; it logs, unregisters the actor and sets ``actor_stopped``. For an
  ``ask`` the exception goes to the caller and the actor lives on.
* ``_actor_loop`` is the thread's whole life (setup, running, teardown); on every exit path
  it returns normally, and ``_actor_loop_teardown`` answers the asks still in the inbox
  (``ActorDeadError``, or None for a stop).
* A ``ThreadingFuture`` completed a second time raises ``queue.Full``.
"""

from __future__ import annotations

import queue
import sys
from types import TracebackType
from typing import Any, ClassVar

import pykka
from pykka import messages as _pykka_messages
from pykka._envelope import Envelope

__all__ = [
    "PYKKA_MAJOR",
    "AlreadySet",
    "FirstWinsFuture",
    "RuntimeActor",
    "envelope",
    "is_stop",
]

#: The pykka major version this module is written for (``pyproject.toml`` pins ``<5``).
PYKKA_MAJOR = 4

#: What completing a pykka future a second time raises (``queue.Full`` in pykka 4).
AlreadySet: type[Exception] = queue.Full

#: The message ``ActorRef.stop()`` sends.
_STOP: type[Any] = _pykka_messages._ActorStop


def envelope(message: Any) -> Any:
    """``message`` as ``tell`` would put it in an inbox (for an inbox that makes its own)."""
    return Envelope(message)


def is_stop(message: Any) -> bool:
    """Whether ``message`` is the runtime's own stop request (``ActorRef.stop()``)."""
    return isinstance(message, _STOP)


class FirstWinsFuture(pykka.ThreadingFuture[Any]):
    """A reply future whose first completion wins and later ones are ignored.

    A caller may give up on an actor (e.g. :class:`~kafka_actors.supervisors.ChildTable` fails
    the calls waiting on a child the moment its exit is processed) while the actor, abandoned,
    still answers later; pykka would then raise :data:`AlreadySet` in the actor's thread.
    """

    def set(self, value: Any | None = None) -> None:
        try:
            super().set(value)
        except AlreadySet:
            pass

    def set_exception(self, exc_info: Any = None) -> None:
        if exc_info is None:
            exc_info = sys.exc_info()
        try:
            super().set_exception(exc_info)
        except AlreadySet:
            pass


class RuntimeActor(pykka.ThreadingActor):
    """A pykka ``ThreadingActor`` with our hooks in place of pykka's private methods.

    Subclasses use pykka's public hooks (``on_start``, ``on_receive``, ``on_stop``,
    ``on_failure``) and may override these, all run on the actor's thread unless said:

    * :meth:`create_inbox` (class level, on the creating thread): the inbox; it must behave as
      a ``queue.Queue`` of envelopes (:func:`envelope`).
    * :attr:`reply_future`: the class of the futures ``ask`` waits on.
    * :meth:`before_receive`: before each message except the stop request (told, asked or a
      proxy call); an exception fails that message as one from ``on_receive`` would.
    * :meth:`on_crash`: each failure the runtime handles, before it logs the failure and stops
      the actor: an exception from ``on_start``, from a told message, from ``on_stop`` or from
      ``on_failure`` (unlike ``on_failure``, which a failed ``on_start`` or ``on_stop`` skips).
    * :meth:`on_undelivered`: each message still in the inbox when the actor stops, before the
      runtime fails the asks among them with ``ActorDeadError``.
    * :meth:`on_thread_exit`: the thread's last act, on every exit path.
    """

    reply_future: ClassVar[type[pykka.Future[Any]]] = pykka.ThreadingFuture

    # -- our hooks ---------------------------------------------------------------------------

    @classmethod
    def create_inbox(cls) -> Any:
        return queue.Queue()

    def before_receive(self, message: Any) -> None:
        """Runs before each message but the stop request (see the class docstring)."""

    def on_crash(self, exception: BaseException | None) -> None:
        """A failure the runtime handles (see the class docstring)."""

    def on_undelivered(self, message: Any) -> None:
        """A message left in the inbox at stop (see the class docstring)."""

    def on_thread_exit(self) -> None:
        """The actor thread's last act."""

    # -- pykka's private hooks, mapped onto ours (the only overrides of them) ----------------

    @classmethod
    def _create_actor_inbox(cls) -> Any:
        return cls.create_inbox()

    @classmethod
    def _create_future(cls) -> pykka.Future[Any]:
        return cls.reply_future()

    def _handle_receive(self, message: Any) -> Any:
        if not isinstance(message, _STOP):
            self.before_receive(message)
        return super()._handle_receive(message)

    def _handle_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.on_crash(exception_value)
        super()._handle_failure(exception_type, exception_value, traceback)

    def _actor_loop(self) -> None:
        try:
            super()._actor_loop()
        finally:
            self.on_thread_exit()

    def _actor_loop_teardown(self) -> None:
        if type(self).on_undelivered is not RuntimeActor.on_undelivered:
            inbox = self.actor_inbox
            leftover: list[Any] = []
            while not inbox.empty():
                try:
                    item = inbox.get(False)  # type: ignore[call-arg]
                except queue.Empty:
                    break
                leftover.append(item)
                self.on_undelivered(item.message)
            for item in leftover:
                inbox.put(item)  # pykka's teardown answers the ask() callers among them
        super()._actor_loop_teardown()
