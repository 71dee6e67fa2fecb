"""tts_fleet/scaling/bands.py: exact bands, the formula, desired(), the alarm model (DESIGN §4)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tts_fleet.config.models import ScalingConfig
from tts_fleet.scaling.bands import (
    MAX_STEP_ADJUSTMENTS,
    AlarmModel,
    Band,
    Scaling,
    bands,
    capacity_levels,
    desired,
    formula,
    step_capacity,
)


def scaling(**fields: int) -> Scaling:
    """A Scaling with the config's defaults (ScalingConfig's fields) for what is not given."""
    defaults = ScalingConfig()
    names = ("min_workers", "max_workers", "jobs_per_worker", "idle_minutes")
    return Scaling(**{name: fields.get(name, getattr(defaults, name)) for name in names})


def ceil_div(outstanding: int, jobs: int) -> int:
    return -(-outstanding // jobs)


def assert_structure(cfg: Scaling) -> None:
    """The shape every band plan must have, whatever the config."""
    plan = bands(cfg)
    capacities = [band.capacity for band in plan.bands]
    assert len(plan.bands) <= MAX_STEP_ADJUSTMENTS
    assert plan.bands[0].lower == 0  # outstanding 1 (metric - threshold 0) is covered
    assert plan.bands[-1].upper is None
    assert capacities[-1] == cfg.max_workers
    assert capacities == sorted(set(capacities))  # strictly increasing
    for left, right in itertools.pairwise(plan.bands):
        assert left.upper == right.lower  # no gap, no overlap


def worst_ratio(cfg: Scaling, outstanding_values: Iterable[int]) -> float:
    """Checks capacity >= formula for every value; returns the worst capacity/formula."""
    plan = bands(cfg)
    worst = 1.0
    for outstanding in outstanding_values:
        capacity = step_capacity(outstanding, plan)
        assert formula(outstanding, cfg) <= capacity <= cfg.max_workers, outstanding
        worst = max(worst, capacity / formula(outstanding, cfg))
    return worst


def assert_invariants(cfg: Scaling, outstanding_values: range) -> None:
    assert_structure(cfg)
    assert math.isclose(worst_ratio(cfg, outstanding_values), bands(cfg).worst_overprovision)


@pytest.mark.parametrize(
    ("jobs", "max_workers", "expected"),
    [
        (8, 4, [Band(0, 8, 1), Band(8, 16, 2), Band(16, 24, 3), Band(24, None, 4)]),
        (8, 1, [Band(0, None, 1)]),
        (1, 3, [Band(0, 1, 1), Band(1, 2, 2), Band(2, None, 3)]),
        (16, 2, [Band(0, 16, 1), Band(16, None, 2)]),
    ],
)
def test_bands_exact_small(jobs: int, max_workers: int, expected: list[Band]) -> None:
    plan = bands(scaling(max_workers=max_workers, jobs_per_worker=jobs))
    assert list(plan.bands) == expected
    assert plan.worst_overprovision == 1.0


def test_bands_max_20_is_one_band_per_worker() -> None:
    plan = bands(scaling(max_workers=20, jobs_per_worker=8))
    assert len(plan.bands) == 20
    assert [b.capacity for b in plan.bands] == list(range(1, 21))
    assert [b.lower for b in plan.bands] == [8 * k for k in range(20)]
    assert plan.worst_overprovision == 1.0


@pytest.mark.parametrize("max_workers", [50, 200])
@pytest.mark.parametrize("jobs", [1, 8, 16])
def test_bands_above_the_quota_keep_20_levels(max_workers: int, jobs: int) -> None:
    cfg = scaling(max_workers=max_workers, jobs_per_worker=jobs)
    plan = bands(cfg)
    assert len(plan.bands) == MAX_STEP_ADJUSTMENTS
    assert plan.bands[-1].capacity == max_workers
    assert plan.worst_overprovision > 1.0
    assert_invariants(cfg, range(1, max_workers * jobs + jobs + 1))


def test_bands_max_50_exact_levels_and_worst_case() -> None:
    # The optimum (see the brute force below): worst ratio 9/8 = 1.125, from 7 → 9.
    plan = bands(scaling(max_workers=50, jobs_per_worker=8))
    assert [b.capacity for b in plan.bands] == [
        *range(1, 8),
        9,
        11,
        13,
        15,
        17,
        20,
        23,
        26,
        30,
        34,
        39,
        44,
        50,
    ]
    assert plan.worst_overprovision == pytest.approx(1.125)


@cache
def optimal_worst_ratio(start: int, top: int, limit: int) -> float:
    """Brute force: the least worst ratio over every choice of <= limit levels start..top."""
    if start == top:
        return 1.0
    if limit == 1:
        return math.inf
    return min(
        max(nxt / (start + 1), optimal_worst_ratio(nxt, top, limit - 1))
        for nxt in range(start + 1, top + 1)
    )


@pytest.mark.parametrize(("max_workers", "limit"), [(10, 4), (17, 5), (30, 6), (60, 8), (50, 20)])
def test_capacity_levels_minimise_the_worst_overprovisioning(max_workers: int, limit: int) -> None:
    levels = capacity_levels(max_workers, limit)
    assert len(levels) <= limit
    assert levels[0] == 1 and levels[-1] == max_workers
    worst = max(b / (a + 1) for a, b in itertools.pairwise(levels))
    assert worst == pytest.approx(optimal_worst_ratio(1, max_workers, limit))


def test_bands_with_min_workers_spend_no_level_below_it() -> None:
    plan = bands(scaling(min_workers=3, max_workers=5, jobs_per_worker=8))
    assert list(plan.bands) == [Band(0, 24, 3), Band(24, 32, 4), Band(32, None, 5)]
    big = scaling(min_workers=5, max_workers=60, jobs_per_worker=8)
    assert bands(big).bands[0] == Band(0, 40, 5)
    assert_invariants(big, range(1, 60 * 8 + 9))


def test_bands_follow_a_stack_config_model() -> None:
    cfg = ScalingConfig(max_workers=4, jobs_per_worker=8)
    assert bands(cfg) == bands(scaling(max_workers=4, jobs_per_worker=8))


@settings(max_examples=150, deadline=None)
@given(
    jobs=st.integers(1, 64),
    max_workers=st.integers(1, 400),
    min_fraction=st.floats(0, 1),
    data=st.data(),
)
def test_bands_property(jobs: int, max_workers: int, min_fraction: float, data) -> None:
    min_workers = int(min_fraction * max_workers)
    cfg = scaling(min_workers=min_workers, max_workers=max_workers, jobs_per_worker=jobs)
    top = max_workers * jobs + jobs
    samples = data.draw(st.lists(st.integers(1, top), min_size=1, max_size=50))
    plan = bands(cfg)
    # Both sides of every band edge, plus random values and far beyond the top band.
    edges = [v for b in plan.bands for v in (b.lower, b.lower + 1) if v >= 1]
    assert_structure(cfg)
    worst = worst_ratio(cfg, [*samples, *edges, top, top * 10])
    assert worst <= plan.worst_overprovision + 1e-12


def test_step_capacity_compares_raw_values_and_rejects_below_threshold() -> None:
    plan = bands(scaling(max_workers=4, jobs_per_worker=8))
    assert step_capacity(8, plan) == 1
    assert step_capacity(8.5, plan) == 1  # metric - threshold 7.5 < 8
    assert step_capacity(9, plan) == 2
    assert step_capacity(10_000, plan) == 4
    with pytest.raises(ValueError, match="below the alarm threshold"):
        step_capacity(0, plan)


# --- formula and desired() -------------------------------------------------------------


@pytest.mark.parametrize(
    ("outstanding", "min_workers", "max_workers", "expected"),
    [(1, 0, 4, 1), (8, 0, 4, 1), (9, 0, 4, 2), (32, 0, 4, 4), (10_000, 0, 4, 4), (1, 2, 4, 2)],
)
def test_formula_table(outstanding: int, min_workers: int, max_workers: int, expected: int) -> None:
    cfg = scaling(min_workers=min_workers, max_workers=max_workers, jobs_per_worker=8)
    assert formula(outstanding, cfg) == expected


def test_desired_rules() -> None:
    cfg = scaling(min_workers=0, max_workers=4, jobs_per_worker=8, idle_minutes=5)
    assert desired(17, 0, cfg) == 3  # scale out from zero
    assert desired(9, 4, cfg) == 2  # follows the backlog down
    assert desired(0, 3, cfg) == 3  # an empty queue alone keeps the fleet
    assert desired(0, 3, cfg, idle=True) == 0  # the idle rule returns it to minWorkers
    assert desired(0, 9, cfg) == 4  # clamped to max even when idle has not fired
    floor = scaling(min_workers=2, max_workers=4, jobs_per_worker=8)
    assert desired(0, 3, floor, idle=True) == 2
    assert desired(0, 0, floor) == 2


@settings(max_examples=300, deadline=None)
@given(
    outstanding=st.integers(0, 5000),
    current=st.integers(0, 300),
    min_workers=st.integers(0, 50),
    extra=st.integers(0, 250),
    jobs=st.integers(1, 64),
    idle=st.booleans(),
)
def test_desired_property(
    outstanding: int, current: int, min_workers: int, extra: int, jobs: int, idle: bool
) -> None:
    cfg = scaling(
        min_workers=min_workers, max_workers=max(1, min_workers + extra), jobs_per_worker=jobs
    )
    result = desired(outstanding, current, cfg, idle=idle)
    assert cfg.min_workers <= result <= cfg.max_workers
    if outstanding > 0:
        assert result >= min(cfg.max_workers, ceil_div(outstanding, jobs))
        assert result >= 1
    if result == 0:
        assert cfg.min_workers == 0
        # It only drops to zero through the idle rule; a fleet already at zero stays there.
        assert idle or current == 0


# --- the alarm model ---------------------------------------------------------------------

CFG = scaling(min_workers=0, max_workers=4, jobs_per_worker=8, idle_minutes=3)


def test_scale_out_alarm_is_one_period_at_one_job() -> None:
    model = AlarmModel(CFG)
    assert model.state([0, 0, 1]).scale_out
    assert not model.state([5, 5, 0]).scale_out
    assert not model.state([5, None]).scale_out  # missing data: not breaching
    assert not model.state([]).scale_out


def test_idle_alarm_needs_idle_minutes_of_empty_queue() -> None:
    model = AlarmModel(CFG)
    assert not model.state([4, 0, 0]).idle
    assert model.state([4, 0, 0, 0]).idle
    assert not model.state([0, 0, 0, 1]).idle


def test_missing_data_counts_as_idle() -> None:
    model = AlarmModel(CFG)
    assert model.state([3, None, 0, None]).idle
    assert model.state([None, None, None]).idle
    assert model.state([]).idle  # no data at all: breaching
    assert not model.state([None, 2, None]).idle


def test_policy_is_reapplied_every_evaluation_while_in_alarm() -> None:
    model = AlarmModel(CFG)
    series: list[float | None] = []
    counts = []
    current = 0
    for outstanding in [30, 30, 20, 9, 3, 0, 0, 0, None, 0]:
        series.append(outstanding)
        current = model.evaluate(series, current)
        counts.append(current)
    # In ALARM the step follows the backlog down as well as up (30 → 4, 20 → 3, 9 → 2,
    # 3 → 1); then the fleet holds until idle has been true for 3 periods, and goes to 0.
    assert counts == [4, 4, 3, 2, 1, 1, 1, 0, 0, 0]


def test_evaluate_uses_the_bands_not_the_plain_formula_above_the_quota() -> None:
    cfg = scaling(max_workers=50, jobs_per_worker=8, idle_minutes=5)
    model = AlarmModel(cfg)
    # outstanding 57 → formula 8, band (7, 9] → 9 workers.
    assert formula(57, cfg) == 8
    assert model.evaluate([57], current=0) == 9


def test_alarm_model_rejects_an_idle_window_cloudwatch_cannot_evaluate() -> None:
    with pytest.raises(ValueError, match=r"1\.\.1440"):
        AlarmModel(scaling(idle_minutes=1441))
    with pytest.raises(ValueError, match=r"1\.\.1440"):
        AlarmModel(scaling(idle_minutes=0))
