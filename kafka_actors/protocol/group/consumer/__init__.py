"""The KIP-848 consumer-group member: its states, the ConsumerGroupHeartbeat request
manager, the reconciliation of a new assignment and the membership manager composing
them. Pure.
"""
