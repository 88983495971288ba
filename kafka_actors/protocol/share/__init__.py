"""Share groups (KIP-932): ShareGroupHeartbeat membership, ShareFetch and
ShareAcknowledge with their sessions, the acquired-records buffer and acknowledgements.
Pure.
"""
