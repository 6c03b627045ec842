"""The SQLite replica's configuration: which variant it runs, its acknowledgement bound, its parameter prefix.

What it holds: ``ReplicaConfig``, the constants of one ``SqliteReplica``
(not state): the ``Variant`` of the shared contract (``spec.variants``), the
seed's ``MAX_PROJECT_ENV_ACK_PAGE_BYTES`` (docs/protocol.md section 2,
default 262144) and the credential-store prefix of parameter names
(section 4, default ``/envreplica``). Each value is checked when the config
is built, so a replica never runs on a bound or prefix it cannot use.

Leaves out on purpose: the master key (``impl.sealing``), the value store
(``impl.valuestores``) and the file's options (``SqliteReplica``'s own
arguments): none of them changes what the protocol decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from envreplica.impl.tables import count_of
from envreplica.spec.variants import Variant

__all__ = ["ReplicaConfig", "DEFAULT_ACK_PAGE_BYTES", "DEFAULT_PREFIX"]

#: The seed's ``MAX_PROJECT_ENV_ACK_PAGE_BYTES`` (docs/protocol.md section 2).
DEFAULT_ACK_PAGE_BYTES = 262144
#: The credential-store prefix of parameter names (docs/protocol.md section 4).
DEFAULT_PREFIX = "/envreplica"


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """What one ``SqliteReplica`` runs: variant, acknowledgement byte bound, parameter-name prefix."""

    variant: Variant = Variant.FIXED  # the seed as written, or with its fixes (docs/findings.md)
    ack_page_bytes: int = DEFAULT_ACK_PAGE_BYTES  # the largest page acknowledgement, in UTF-8 bytes
    prefix: str = DEFAULT_PREFIX  # parameter names start with it (docs/protocol.md section 4)

    def __post_init__(self) -> None:
        if not isinstance(self.variant, Variant):
            try:
                object.__setattr__(self, "variant", Variant(self.variant))
            except ValueError:
                raise ValueError(f"ReplicaConfig.variant must be one of {[v.value for v in Variant]}; got "
                                 f"{self.variant!r}. Pass a spec.variants.Variant") from None
        if not count_of(self.ack_page_bytes):  # a Count: an int (not a bool) in 0..wire.MAX_COUNT
            raise ValueError(f"ReplicaConfig.ack_page_bytes must be a Count (an integer 0..2^53-1); got "
                             f"{self.ack_page_bytes!r}. Pass the acknowledgement bound in bytes (default "
                             f"{DEFAULT_ACK_PAGE_BYTES})")
        if not isinstance(self.prefix, str):
            raise ValueError(f"ReplicaConfig.prefix must be a string; got a {type(self.prefix).__name__}. "
                             f"Pass a parameter-name prefix such as {DEFAULT_PREFIX!r}")
