"""Parallel processing on the consumer core: key-ordered concurrency inside a partition,
completed offsets remembered in the commit metadata, bounded retries and dead letters
(``docs/parallel.md``).

The pure core (no threads, no sockets, time injected): :mod:`.offset_map` (the map in the
commit metadata), :mod:`.window` (one partition's completion window), :mod:`.scheduler` (what
may start now: ordering, bounds, back-pressure, retries), :mod:`.messages` (the values it
hands out). The front end: :mod:`.consumer` (:class:`ParallelConsumer`).
"""
