"""envreplica.model."""

import envreplica.spec  # noqa: F401  (spec.compiled decides, before this package's modules load, how they run)
