"""envreplica.impl."""
