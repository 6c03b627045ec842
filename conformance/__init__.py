"""envreplica.conformance."""
