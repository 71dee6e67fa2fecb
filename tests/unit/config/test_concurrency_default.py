"""worker.concurrency's default, derived from the GPU memory the stack selects (issue #23)."""

from __future__ import annotations

import pytest

from tts_fleet.config.models import StackConfig


@pytest.mark.parametrize(
    ("gib", "concurrency"),
    [(48, 16), (44, 16), (40, 16), (39, 8), (24, 8), (20, 8), (19, 4), (16, 4)],
)
def test_unset_concurrency_follows_the_gpu_memory_floor(gib: int, concurrency: int) -> None:
    cfg = StackConfig.from_raw({"gpu": {"minGpuMemoryGib": gib}})
    assert cfg.worker.concurrency == concurrency


def test_the_default_stack_keeps_8_requests_in_flight() -> None:
    # gpu.minGpuMemoryGib defaults to 20: the 24-GB L4 / A10G class.
    assert StackConfig().worker.concurrency == 8
    assert StackConfig.from_raw({}).worker.concurrency == 8


@pytest.mark.parametrize("explicit", [1, 4, 32])
def test_an_explicit_concurrency_wins(explicit: int) -> None:
    raw = {"gpu": {"minGpuMemoryGib": 48}, "worker": {"concurrency": explicit}}
    assert StackConfig.from_raw(raw).worker.concurrency == explicit


def test_other_worker_keys_keep_the_derived_default() -> None:
    raw = {"gpu": {"minGpuMemoryGib": 48}, "worker": {"maxTextChars": 5000}}
    cfg = StackConfig.from_raw(raw)
    assert (cfg.worker.concurrency, cfg.worker.max_text_chars) == (16, 5000)
