"""The embedded default cluster: librdkafka's mock cluster, from confluent-kafka's wheel.

Owns: one mock cluster and the librdkafka handle that hosts it. The mock brokers are
threads of this process speaking the real Kafka protocol on loopback ports; they vanish
when :meth:`MockCluster.stop` destroys the cluster. May touch: the librdkafka shared library
shipped with confluent-kafka (through ``ctypes``: the ``rd_kafka_mock_*`` C API, which the
Python binding does not expose) and confluent-kafka itself. No JVM, no files.

Two back ends:

* ``ctypes`` (used when the library is found): ``rd_kafka_mock_cluster_new`` on a private
  handle. Topics of any partition count can be created, brokers taken down and up, and
  request errors injected.
* ``client`` (fallback): a confluent-kafka client configured with ``test.mock.num.brokers``;
  the bootstrap servers are read with ``list_topics()``. Only auto-created topics exist
  (4 partitions each); the control calls raise :class:`MockClusterError`.

Lifetimes: the mock cluster is made on a handle of its own, so :meth:`MockCluster.stop`
destroys the cluster, then the handle. Every call into the cluster holds the instance's lock,
and so does the destruction: a control call racing :meth:`MockCluster.stop` on another thread
runs on the live cluster or raises :class:`MockClusterError` (as every call after the stop
does); it never reaches freed memory.

Facts (REFERENCE.md probes): a mock partition keeps only ~41k records (the log start moves).
The mock asserts on some requests a real broker takes, and an assertion aborts the whole
process (SIGABRT from the mock cluster's thread, the message on stderr): a
ConsumerGroupHeartbeat with topic names and a null regex, or a regex and null names
(``validate_subscription``); our consumer sends both or neither.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self


class MockClusterError(RuntimeError):
    """The mock cluster did not come up, or an operation on it failed."""


_lib_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_searched = False


def _find_library() -> ctypes.CDLL | None:
    """The librdkafka confluent-kafka uses, with the mock C API's signatures declared."""
    global _lib, _lib_searched
    with _lib_lock:
        if _lib_searched:
            return _lib
        _lib_searched = True
        try:
            import confluent_kafka
        except ImportError:
            return None
        site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
        candidates = sorted(
            glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*"))
        )
        system = ctypes.util.find_library("rdkafka")
        if system:
            candidates.append(system)
        for path in candidates:
            try:
                lib = ctypes.CDLL(path)
                _declare(lib)
            except (OSError, AttributeError):
                continue
            _lib = lib
            return lib
        return None


def _declare(lib: ctypes.CDLL) -> None:
    vp, i32, cp = ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "rd_kafka_conf_new": (vp, []),
        "rd_kafka_conf_set": (ctypes.c_int, [vp, cp, cp, cp, ctypes.c_size_t]),
        "rd_kafka_new": (vp, [ctypes.c_int, vp, cp, ctypes.c_size_t]),
        "rd_kafka_destroy": (None, [vp]),
        "rd_kafka_err2str": (cp, [ctypes.c_int]),
        "rd_kafka_mock_cluster_new": (vp, [vp, ctypes.c_int]),
        "rd_kafka_mock_cluster_destroy": (None, [vp]),
        "rd_kafka_mock_cluster_bootstraps": (cp, [vp]),
        "rd_kafka_mock_topic_create": (ctypes.c_int, [vp, cp, ctypes.c_int, ctypes.c_int]),
        "rd_kafka_mock_set_apiversion": (
            ctypes.c_int,
            [vp, ctypes.c_int16, ctypes.c_int16, ctypes.c_int16],
        ),
        "rd_kafka_mock_topic_delete": (ctypes.c_int, [vp, cp]),
        "rd_kafka_mock_broker_set_down": (ctypes.c_int, [vp, i32]),
        "rd_kafka_mock_broker_set_up": (ctypes.c_int, [vp, i32]),
        "rd_kafka_mock_broker_set_rtt": (ctypes.c_int, [vp, i32, ctypes.c_int]),
        "rd_kafka_mock_partition_set_leader": (ctypes.c_int, [vp, cp, i32, i32]),
        "rd_kafka_mock_coordinator_set": (ctypes.c_int, [vp, cp, cp, i32]),
        "rd_kafka_mock_push_request_errors_array": (
            None,
            [vp, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)],
        ),
        "rd_kafka_mock_clear_request_errors": (None, [vp, ctypes.c_int16]),
        "rd_kafka_mock_start_request_tracking": (None, [vp]),
        "rd_kafka_mock_stop_request_tracking": (None, [vp]),
        "rd_kafka_mock_get_requests": (
            ctypes.POINTER(vp),
            [vp, ctypes.POINTER(ctypes.c_size_t)],
        ),
        "rd_kafka_mock_clear_requests": (None, [vp]),
        "rd_kafka_mock_request_id": (i32, [vp]),
        "rd_kafka_mock_request_api_key": (ctypes.c_int16, [vp]),
        "rd_kafka_mock_request_timestamp": (ctypes.c_int64, [vp]),
        "rd_kafka_mock_request_destroy_array": (None, [ctypes.POINTER(vp), ctypes.c_size_t]),
        "rd_kafka_mock_group_initial_rebalance_delay_ms": (None, [vp, i32]),
        "rd_kafka_mock_sharegroup_set_heartbeat_interval": (None, [vp, ctypes.c_int]),
        "rd_kafka_mock_set_group_consumer_session_timeout_ms": (None, [vp, ctypes.c_int]),
        "rd_kafka_mock_set_group_consumer_heartbeat_interval_ms": (None, [vp, ctypes.c_int]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


@dataclass(frozen=True, slots=True)
class MockRequest:
    """One request a mock broker received (while request tracking was on).

    ``timestamp_us`` is librdkafka's monotonic clock (microseconds) at arrival: compare
    timestamps with each other only.
    """

    broker_id: int
    api_key: int
    timestamp_us: int


class MockCluster:
    """A librdkafka mock cluster of ``num_brokers`` brokers; a context manager.

    ``backend`` is ``"auto"`` (ctypes when possible), ``"ctypes"`` or ``"client"``.
    """

    def __init__(
        self, num_brokers: int = 3, *, backend: str = "auto", start_timeout: float = 30.0
    ) -> None:
        if num_brokers < 1:
            raise ValueError("num_brokers must be >= 1")
        if backend not in ("auto", "ctypes", "client"):
            raise ValueError(f"unknown backend {backend!r}")
        self.num_brokers = num_brokers
        self.requested_backend = backend
        self.backend = ""
        self.start_timeout = start_timeout
        self._lib: ctypes.CDLL | None = None
        self._rk: int | None = None
        self._mcluster: int | None = None
        self._client: Any = None
        self._bootstrap = ""
        self._lock = threading.RLock()

    # ----- lifecycle ----------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return bool(self._bootstrap)

    @property
    def bootstrap_servers(self) -> str:
        if not self._bootstrap:
            raise MockClusterError("mock cluster not started")
        return self._bootstrap

    def start(self) -> Self:
        with self._lock:
            if self._bootstrap:
                return self
            lib = _find_library() if self.requested_backend != "client" else None
            if lib is not None:
                self._start_ctypes(lib)
            elif self.requested_backend == "ctypes":
                raise MockClusterError("librdkafka's mock API is not loadable through ctypes")
            else:
                self._start_client()
            return self

    def _start_ctypes(self, lib: ctypes.CDLL) -> None:
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, 512)
        rk = lib.rd_kafka_new(0, conf, errstr, 512)  # RD_KAFKA_PRODUCER
        if not rk:
            raise MockClusterError(f"rd_kafka_new failed: {errstr.value.decode()}")
        mcluster = lib.rd_kafka_mock_cluster_new(rk, self.num_brokers)
        if not mcluster:
            lib.rd_kafka_destroy(rk)
            raise MockClusterError("rd_kafka_mock_cluster_new failed")
        self._lib, self._rk, self._mcluster = lib, rk, mcluster
        self._bootstrap = lib.rd_kafka_mock_cluster_bootstraps(mcluster).decode()
        self.backend = "ctypes"

    def _start_client(self) -> None:
        from confluent_kafka import Producer

        client = Producer({"test.mock.num.brokers": self.num_brokers, "log_level": 3})
        deadline = time.monotonic() + self.start_timeout
        brokers: dict[int, Any] = {}
        while time.monotonic() < deadline:
            brokers = dict(client.list_topics(timeout=5).brokers)
            if len(brokers) >= self.num_brokers:
                break
            time.sleep(0.05)
        if len(brokers) < self.num_brokers:
            raise MockClusterError(f"mock cluster shows {len(brokers)} brokers")
        self._client = client
        self._bootstrap = ",".join(f"{b.host}:{b.port}" for _, b in sorted(brokers.items()))
        self.backend = "client"

    def stop(self) -> None:
        """Destroy the mock cluster (its brokers close their sockets) and its handle.

        Idempotent. Under the lock, so no control call runs on the cluster while it goes;
        the calls after it raise :class:`MockClusterError`."""
        with self._lock:
            lib, rk, mcluster = self._lib, self._rk, self._mcluster
            self._lib = self._rk = self._mcluster = None
            client, self._client = self._client, None
            self._bootstrap = ""
            if lib is not None and mcluster is not None:
                lib.rd_kafka_mock_cluster_destroy(mcluster)
            if lib is not None and rk is not None:
                lib.rd_kafka_destroy(rk)
        if client is not None:
            client.flush(0)
            del client

    # ----- control (ctypes back end) ------------------------------------------------

    @contextmanager
    def _mock(self) -> Iterator[tuple[ctypes.CDLL, int]]:
        """The library and the live cluster, under the lock :meth:`stop` destroys it under:
        every ``rd_kafka_mock_*`` call on the cluster is made inside this block."""
        with self._lock:
            if self._lib is None or self._mcluster is None:
                if self.backend == "client":
                    raise MockClusterError("this operation needs the ctypes back end")
                raise MockClusterError("the mock cluster is not running (not started or stopped)")
            yield self._lib, self._mcluster

    def _call(self, fn: str, *args: Any, what: str = "") -> None:
        """``rd_kafka_mock_<fn>(cluster, *args)``; a non-zero error code raises (``what``:
        the subject of its message)."""
        with self._mock() as (lib, mc):
            err = getattr(lib, f"rd_kafka_mock_{fn}")(mc, *args)
        if err:
            raise MockClusterError(f"{what or fn}: {lib.rd_kafka_err2str(err).decode()} ({err})")

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Create ``name`` with ``partitions`` partitions; waits until clients see leaders.

        ``replication_factor`` defaults to min(3, brokers). ``config`` is not supported by
        the mock (it keeps no topic configs) and must be empty.
        """
        if config:
            raise MockClusterError("the mock cluster does not keep topic configs")
        rf = replication_factor or min(3, self.num_brokers)
        self._call("topic_create", name.encode(), partitions, rf, what=name)
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 3})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = admin.list_topics(topic=name, timeout=5).topics.get(name)
            if (
                t is not None
                and t.error is None
                and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values())
            ):
                return
            time.sleep(0.05)
        raise MockClusterError(f"mock topic {name} has no leaders after {timeout}s")

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name`` from the mock cluster (its partitions and records)."""
        self._call("topic_delete", name.encode(), what=f"delete {name}")

    def broker_down(self, broker_id: int) -> None:
        """Take mock broker ``broker_id`` (1-based) down: connections close, none accepted."""
        self._call("broker_set_down", broker_id, what=f"broker {broker_id}")

    def broker_up(self, broker_id: int) -> None:
        self._call("broker_set_up", broker_id, what=f"broker {broker_id}")

    def set_broker_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of ``broker_id`` by ``rtt_ms``."""
        self._call("broker_set_rtt", broker_id, rtt_ms, what="rtt")

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        self._call(
            "partition_set_leader",
            topic.encode(),
            partition,
            broker_id,
            what=f"{topic}-{partition}",
        )

    def set_coordinator(self, key_type: str, key: str, broker_id: int) -> None:
        """Pin the ``"group"`` or ``"transaction"`` coordinator of ``key`` to a broker."""
        self._call(
            "coordinator_set",
            key_type.encode(),
            key.encode(),
            broker_id,
            what=f"coordinator {key_type}:{key}",
        )

    def set_api_version(self, api_key: int, min_version: int, max_version: int) -> None:
        """Make every mock broker advertise (and accept) only ``min..max`` of ``api_key``;
        ``-1, -1`` removes the API from ApiVersions."""
        self._call(
            "set_apiversion", api_key, min_version, max_version, what=f"api version {api_key}"
        )

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """Answer the next ``len(errors)`` requests of ``api_key`` (any broker) with these
        Kafka error codes, in order."""
        arr = (ctypes.c_int * len(errors))(*errors)
        self._call(
            "push_request_errors_array", api_key, len(errors), arr, what="push request errors"
        )

    def set_group_initial_rebalance_delay_ms(self, delay_ms: int) -> None:
        self._call("group_initial_rebalance_delay_ms", delay_ms)

    def set_group_consumer_session_timeout_ms(self, timeout_ms: int) -> None:
        self._call("set_group_consumer_session_timeout_ms", timeout_ms)

    def set_share_group_heartbeat_interval_ms(self, interval_ms: int) -> None:
        """The heartbeat interval the mock hands share-group members."""
        self._call("sharegroup_set_heartbeat_interval", interval_ms)

    def set_group_consumer_heartbeat_interval_ms(self, interval_ms: int) -> None:
        self._call("set_group_consumer_heartbeat_interval_ms", interval_ms)

    def clear_request_errors(self, api_key: int) -> None:
        """Forget the errors still queued for ``api_key`` (see :meth:`push_request_errors`)."""
        self._call("clear_request_errors", api_key)

    # ----- request tracking -----------------------------------------------------------

    def start_request_tracking(self) -> None:
        """Record every request any mock broker receives from now on (:meth:`requests`)."""
        self._call("start_request_tracking")

    def stop_request_tracking(self) -> None:
        """Stop recording requests and forget the recorded ones."""
        self._call("stop_request_tracking")

    def clear_requests(self) -> None:
        """Forget the requests recorded so far (tracking stays on)."""
        self._call("clear_requests")

    def requests(self, api_key: int | None = None) -> list[MockRequest]:
        """The requests recorded since tracking started (or the last :meth:`clear_requests`),
        in arrival order; only those of ``api_key`` when given. Empty when tracking is off."""
        out: list[MockRequest] = []
        with self._mock() as (lib, mc):
            count = ctypes.c_size_t(0)
            array = lib.rd_kafka_mock_get_requests(mc, ctypes.byref(count))
            if not array:
                return out
            try:
                for i in range(count.value):
                    req = array[i]
                    key = int(lib.rd_kafka_mock_request_api_key(req))
                    if api_key is None or key == api_key:
                        out.append(
                            MockRequest(
                                broker_id=int(lib.rd_kafka_mock_request_id(req)),
                                api_key=key,
                                timestamp_us=int(lib.rd_kafka_mock_request_timestamp(req)),
                            )
                        )
            finally:
                lib.rd_kafka_mock_request_destroy_array(array, count.value)
        return out

    def request_counts(self) -> dict[int, int]:
        """How many requests of each API key were recorded (see :meth:`requests`)."""
        counts: dict[int, int] = {}
        for req in self.requests():
            counts[req.api_key] = counts.get(req.api_key, 0) + 1
        return counts
