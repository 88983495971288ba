"""kafka_actors.protocol"""
