"""envreplica.model."""
