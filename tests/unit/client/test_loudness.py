"""Loudness and true peak (tts_fleet/client/loudness.py) on synthetic signals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tts_fleet.client.loudness import (
    integrated_lufs,
    limit,
    normalise,
    oversampled_peaks,
    true_peak_dbtp,
)

RATE = 24_000


def sine(freq: float, amplitude: float, seconds: float = 3.0, phase: float = 0.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return np.asarray(amplitude * np.sin(2 * np.pi * freq * t + phase))


def test_a_quarter_rate_sine_sampled_off_its_crests_has_a_true_peak_above_its_samples() -> None:
    # Every sample lands at 45° of the cycle: the samples peak at -3.01 dBFS, the wave at 0.
    wave = sine(RATE / 4, 1.0, phase=math.pi / 4)
    assert 20 * math.log10(np.abs(wave).max()) == pytest.approx(-3.01, abs=0.01)
    assert true_peak_dbtp(wave) == pytest.approx(0.0, abs=0.2)


def test_a_slow_sine_has_its_sample_peak_as_true_peak() -> None:
    assert true_peak_dbtp(sine(100, 0.5)) == pytest.approx(20 * math.log10(0.5), abs=0.02)
    assert oversampled_peaks(np.zeros(10)).max() == 0 and true_peak_dbtp(np.zeros(10)) == -math.inf


def test_a_1khz_sine_measures_as_bs1770_says() -> None:
    # BS.1770: a 997 Hz sine at 0 dBFS peak reads -3.01 LUFS; each halving 6.02 dB less.
    assert integrated_lufs(sine(997, 0.5), RATE) == pytest.approx(-9.03, abs=0.1)
    assert integrated_lufs(sine(997, 0.5, seconds=0.2), RATE) == -math.inf  # under one block


def test_a_signal_under_the_ceiling_is_not_limited() -> None:
    wave = sine(440, 0.3)
    assert limit(wave, RATE, -1.0) is wave


def test_the_limiter_takes_the_peaks_only() -> None:
    wave = sine(300, 0.2)
    wave[RATE : RATE + 5] = 0.95  # a click
    limited = limit(wave, RATE, -6.0)
    assert true_peak_dbtp(limited) <= -6.0 + 0.05
    far = np.r_[0 : RATE // 2, 2 * RATE : wave.size]
    # A second away nothing changed (the output is single precision, as a book is kept).
    assert np.array_equal(limited[far], wave[far].astype(np.float32))


def test_normalising_brings_the_whole_signal_to_the_target_under_the_ceiling() -> None:
    rng = np.random.default_rng(7)
    speechlike = rng.standard_normal(RATE * 8) * 0.05 * (1 + np.sin(np.arange(RATE * 8) / 900))
    speechlike[RATE * 3 : RATE * 3 + 20] = 0.9  # a transient well above the rest
    done = normalise(speechlike, RATE, -16.0, -2.0)
    assert done.lufs == pytest.approx(-16.0, abs=0.1)
    assert integrated_lufs(done.samples, RATE) == pytest.approx(-16.0, abs=0.1)
    assert done.true_peak_dbtp <= -2.0 + 1e-6 and true_peak_dbtp(done.samples) <= -2.0 + 1e-6
    assert done.limited
    # One gain everywhere the limiter did not reach: the loudness is the book's, not a part's.
    ratio = done.samples[: RATE * 2] / speechlike[: RATE * 2]
    assert np.allclose(ratio, 10 ** (done.gain_db / 20))


def test_silence_is_left_as_it_is() -> None:
    done = normalise(np.zeros(RATE), RATE, -18.0, -1.5)
    assert done.measured_lufs == -math.inf and not done.samples.any()
