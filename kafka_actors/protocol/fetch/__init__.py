"""Fetch: the fetch request manager (``manager``), incremental fetch sessions (KIP-227,
``session``) and the buffer of completed fetches (``buffer``). Pure.
"""
