"""The `default` timing profile's batching law against the published sweep it is calibrated to
(aws/deep-learning-containers PR #6022; docs/simulate.md#the-default-profile-calibrated)."""

from __future__ import annotations

import pytest

from tts_fleet.scaling.physics import (
    CALIBRATION_SWEEP,
    DEFAULT_PROFILE,
    SEED_PROFILE,
    Batching,
    fit_power_law,
)

# PR #6022's CustomVoice figures, × real time at 1 / 4 / 8 / 16 in flight, typed in again here
# so an edit of the constants cannot pass unnoticed.
PUBLISHED = {1: 4.08, 4: 8.17, 8: 13.0, 16: 18.0}


def test_the_constants_are_the_published_sweep() -> None:
    assert dict(CALIBRATION_SWEEP) == PUBLISHED


@pytest.mark.parametrize("concurrency", sorted(PUBLISHED))
def test_the_default_profile_reproduces_each_sweep_point_within_10_percent(
    concurrency: int,
) -> None:
    batching = DEFAULT_PROFILE.batching
    r1, _ = fit_power_law(CALIBRATION_SWEEP)
    # The profile's gain over one in flight, scaled by the fit's throughput at one.
    modelled = r1 * batching.throughput(concurrency) / batching.throughput(1)
    assert modelled == pytest.approx(PUBLISHED[concurrency], rel=0.10)


def test_the_linear_law_cannot_fit_the_sweep_within_10_percent() -> None:
    """Why the law gained an exponent: the best linear alpha (any scale) misses a point."""
    best = min(
        max(
            abs(scale * Batching(1.0, alpha / 1000).throughput(c) / r - 1)
            for c, r in PUBLISHED.items()
        )
        for alpha in range(1, 1000)
        for scale in (x / 100 for x in range(300, 500))
    )
    assert best > 0.10


def test_the_fit_is_least_squares_in_log_space() -> None:
    r1, b = fit_power_law(((1, 2.0), (2, 2.0 * 2**0.5), (4, 4.0)))
    assert r1 == pytest.approx(2.0)
    assert b == pytest.approx(0.5)


def test_the_seed_profile_and_the_linear_law_are_unchanged() -> None:
    # A job's latency at 4 in flight, serial (the seed) and at alpha 0.25 (linear).
    assert SEED_PROFILE.batching.latency(4) == 8.0
    assert Batching(2.0, 0.25).latency(4) == 3.5


def test_simulate_s_flags_keep_the_calibrated_law_unless_alpha_is_given() -> None:
    from tts_fleet.cli.simulation import with_batching

    kept = with_batching(DEFAULT_PROFILE, 3.0, None).batching
    assert kept == Batching(3.0, DEFAULT_PROFILE.batching.alpha, DEFAULT_PROFILE.batching.exponent)
    assert with_batching(DEFAULT_PROFILE, None, None) == DEFAULT_PROFILE
    # --batch-alpha names the linear law: latency(c) = job-seconds × (1 + alpha·(c − 1)).
    assert with_batching(DEFAULT_PROFILE, None, 0.25).batching == Batching(2.0, 0.25)
