"""One percentile for every report (simulator, local run): nearest rank, q in 0..1."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least a fraction `q` of the
    values at or below it; None for no values.

    `q` is a fraction (0.95 for p95). A q outside 0..1 raises rather than being read on the
    other scale: `percentile(x, 95)` is a mistake, not the maximum.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q is a fraction in 0..1 (0.95 for p95), got {q!r}")
    ordered = sorted(values)
    if not ordered:
        return None
    # The 1e-9 keeps a product like 0.07 × 100 = 7.000000000000001 on rank 7, not 8.
    rank = max(1, math.ceil(q * len(ordered) - 1e-9))
    return ordered[rank - 1]
