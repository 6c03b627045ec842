"""Drawing: each rule draws one block of bytes (``BLOCK_BYTES``) and ``_Draw`` makes every choice from it.

Every choice is one small integer, so examples shrink to the first option.
What the choices build is in ``generate``.
"""

from __future__ import annotations

import zlib
from typing import Any, Optional, Sequence

from hypothesis import strategies as st

#: Each rule draws ONE block of random bytes and makes every choice of its request
#: from it, a byte at a time (a byte maps to an option; 0 is the first option, where
#: shrinking goes; past the end every choice is 0). So a step is always the same
#: shape in Hypothesis's choice sequence, however many choices the state makes it
#: consume: when shrinking deletes a step, the steps after it still replay aligned
#: (with individually drawn choices most shrink attempts were misaligned).
#: Block sizes per rule kind: about the most choices a request of that kind makes
#: (measured). Every byte costs the shrinker a call, used or not, so no bigger.
#: Rules that store values get ``VALUE_BYTES`` more at the end, read only by ``weighted(tail=i)``: the
#: value of each record, drawn apart from the request's own choices (which would otherwise correlate with it).
VALUE_BYTES = 8
#: ``ffwd``: a clean reconciliation's first choices, then the fast-forward's; the rest of both come from
#: a generator seeded with the block's last ``FFWD_SEED_BYTES`` (``machine.do_ffwd``).
FFWD_SEED_BYTES = 8
BLOCK_BYTES = {"start": 24, "cloud": 32 + VALUE_BYTES, "begin": 12, "page": 28, "delivery": 32, "commit": 6,
               "read": 8, "store": 11 + VALUE_BYTES, "invalid": 32, "ffwd": 24 + FFWD_SEED_BYTES}
_BLOCKS = {kind: st.binary(min_size=n, max_size=n) for kind, n in BLOCK_BYTES.items()}


class _Draw:
    """Choices from one drawn block of bytes; option 0 is where shrinking goes."""

    __slots__ = ("block", "used")

    def __init__(self, block: bytes) -> None:
        self.block = block
        self.used = 0

    def _byte(self) -> int:
        i = self.used
        self.used += 1
        return self.block[i] if i < len(self.block) else 0

    def index(self, n: int) -> int:
        b = self._byte()
        return b * n // 256 if n > 1 else 0

    def one(self, seq: Sequence):
        return seq[self.index(len(seq))]

    def spread(self, seq: Sequence, salt: bytes = b""):
        """One of ``seq``, spread evenly over a long sequence: Hypothesis's bytes are far from uniform (many 0s
        and 255s), so ``one`` of fifty options keeps choosing the ends, and it often draws a block it drew
        before, so a hash of the block alone keeps choosing the same few. The choice is a stable hash of the
        whole block, this choice's place in it and ``salt`` (what the choice is about, e.g. the record it
        moves); a 0 byte, where shrinking goes, is the first option."""
        i = self.used
        if self._byte() == 0:
            return seq[0]
        return seq[zlib.crc32(self.block + bytes([i % 256]) + salt) % len(seq)]

    def weighted(self, options: Sequence[tuple[int, Any]], *, tail: Optional[int] = None):
        """One value; options with weight 0 are skipped. The first option is the shrink target.

        ``tail=i`` takes the choice from the block's ``VALUE_BYTES`` tail
        without consuming anything: the value of a page's i-th record, apart
        from the request's own choices. The tail's bytes are as Hypothesis
        draws them (far from uniform: many 0s and 255s), so the choice is a
        stable hash of the tail and ``i``; an all-zero tail, where shrinking
        goes, is the first option.
        """
        options = [(w, v) for w, v in options if w > 0]
        total = sum(w for w, _ in options)
        if tail is None:
            point = self.index(total)
        else:
            bytes_ = self.block[-VALUE_BYTES:]
            point = 0 if not any(bytes_) else zlib.crc32(bytes_ + bytes([tail % 256])) % total
        for w, v in options:
            if point < w:
                return v
            point -= w
        return options[-1][1]  # pragma: no cover

    def flag(self, percent: int) -> bool:
        """True with about ``percent``% probability; shrinks to False."""
        return self._byte() >= 256 - percent * 256 // 100
