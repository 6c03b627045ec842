"""envreplica.checker."""
