"""One broker connection, sans-I/O: the per-node state machine (``node``), SASL
(``sasl``, with the OAUTHBEARER token logic in ``oauth``) and TLS (``tls``). The
NetworkActor drives it.
"""
