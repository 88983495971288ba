"""kafka_actors.actors"""
