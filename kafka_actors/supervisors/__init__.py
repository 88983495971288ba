"""Supervision trees for pykka actors, restart backoff, and fault injection.

Owns nothing itself; re-exports the public names of:

* :mod:`.core`: the pure rules (:class:`SupervisorCore`, :class:`ChildSpec`,
  :class:`SupervisorSpec`, strategies, restart types, :func:`backoff_delay`);
* :mod:`.supervisor`: the pykka shell (:class:`SupervisedActor`, :class:`Supervision` to make
  any actor a supervisor, :class:`Supervisor`, :func:`start_tree`, :class:`ChildTable` /
  :class:`SupervisedRef` for callers that must never hang);
* :mod:`.faults`: :class:`FaultInjector`;
* :mod:`.errors`: the errors callers may see.

Minimal use::

    tree = start_tree(
        SupervisorSpec(strategy=Strategy.ONE_FOR_ONE, max_restarts=3, period=5.0),
        [ChildSpec("fetch", lambda ctx: FetchActor.start(context=ctx), min_backoff=0.1)],
    )
    tree.ask("fetch", message, timeout=5.0)   # answer | ChildRestartingError | fatal error
    tree.fatal_error                          # set once the root gave up
    tree.shutdown(timeout=30.0)               # children stopped in reverse start order
"""

from kafka_actors.supervisors.core import (
    ChildSpec,
    ChildStatus,
    ExitReason,
    GiveUp,
    Restart,
    Strategy,
    SupervisorCore,
    SupervisorSpec,
    backoff_delay,
)
from kafka_actors.supervisors.errors import (
    ChildRestartingError,
    ChildTimeoutError,
    InjectedFault,
    SupervisionError,
    SupervisorEscalation,
    SupervisorFatalError,
)
from kafka_actors.supervisors.faults import Delay, Drop, ErrorCode, FaultInjector, ResponseFault
from kafka_actors.supervisors.supervisor import (
    ChildContext,
    ChildExited,
    ChildTable,
    ShutdownResult,
    SupervisedActor,
    SupervisedRef,
    Supervision,
    Supervisor,
    SupervisorTree,
    TreeStatus,
    start_tree,
)

__all__ = [
    "ChildContext",
    "ChildExited",
    "ChildRestartingError",
    "ChildSpec",
    "ChildStatus",
    "ChildTable",
    "ChildTimeoutError",
    "Delay",
    "Drop",
    "ErrorCode",
    "ExitReason",
    "FaultInjector",
    "GiveUp",
    "InjectedFault",
    "ResponseFault",
    "Restart",
    "ShutdownResult",
    "Strategy",
    "SupervisedActor",
    "SupervisedRef",
    "Supervision",
    "SupervisionError",
    "Supervisor",
    "SupervisorCore",
    "SupervisorEscalation",
    "SupervisorFatalError",
    "SupervisorSpec",
    "SupervisorTree",
    "TreeStatus",
    "backoff_delay",
    "start_tree",
]
