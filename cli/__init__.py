"""envreplica.cli."""
