"""The one percentile: nearest rank, q a fraction, a q on the wrong scale refused."""

from __future__ import annotations

import pytest

from tts_fleet.stats import percentile

TWENTY = [float(v) for v in range(1, 21)]


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 0.5, None),
        ([3.0], 0.95, 3.0),
        ([4.0, 1.0, 3.0, 2.0], 0.5, 2.0),  # unsorted input; nearest rank: ceil(0.5 · 4) = 2nd
        (TWENTY, 0.95, 19.0),  # ceil(0.95 · 20) = 19th
        (TWENTY, 1.0, 20.0),
        (TWENTY, 0.0, 1.0),  # rank at least 1: the minimum
        ([float(v) for v in range(1, 101)], 0.07, 7.0),  # 0.07 · 100 = 7.000000000000001
    ],
)
def test_percentile_is_nearest_rank(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected


@pytest.mark.parametrize("q", [95, 50, 1.01, -0.1])
def test_a_q_outside_0_to_1_raises_instead_of_reading_another_scale(q: float) -> None:
    # Two scales once lived side by side: the 0..100 one, given 0.95, returned the minimum.
    with pytest.raises(ValueError, match=r"fraction in 0\.\.1"):
        percentile(TWENTY, q)
