"""kafka_actors.testing"""
