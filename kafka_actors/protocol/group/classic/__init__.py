"""The classic group member: JoinGroup/SyncGroup/Heartbeat/LeaveGroup, the rebalance
flow, the heartbeat timers and the client-side assignors. Pure.
"""
