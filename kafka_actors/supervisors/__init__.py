"""kafka_actors.supervisors"""
