"""envreplica.spec."""

from envreplica.spec.compiled import choose

choose()  # before any compiled module of this package loads: compiled, or (ENVREPLICA_PURE_PYTHON=1, stale) source
