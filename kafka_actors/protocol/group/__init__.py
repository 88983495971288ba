"""Consumer groups, under either protocol: the events a member publishes (``events``),
its owned partitions (``owned_partitions``), the coordinator lookup (``coordinator``)
and rebalance-safe commits (``safe_commits``); the KIP-848 member in ``consumer/``, the
classic one in ``classic/``. Pure.
"""
