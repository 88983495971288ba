"""Offsets: OffsetCommit (``commit``), committed offsets by OffsetFetch (``committed``)
and ListOffsets for resets and lookups (``list_offsets``). Pure.
"""
