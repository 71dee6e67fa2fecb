"""One loudness for a whole book: integrated loudness (ITU-R BS.1770-4, measured by
pyloudnorm), true peak (BS.1770-4 Annex 2: the signal oversampled 4× by a polyphase
interpolating filter, the largest absolute sample), and the gain and peak limiting that bring
a book to a target loudness with its true peak under a ceiling.

The whole book is measured at once, never a chapter or a sentence alone: per-part
normalisation makes quiet and loud parts alike and pumps between sentences (mkiol/dsnote#207),
and the two-pass "measure everything, then apply one gain" is what audiobook tools were asked
for (sandreas/m4b-tool#226). The limiter only touches the peaks above the ceiling, so the gain
stays one gain for the book everywhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# BS.1770-4 Annex 2: 4× oversampling; a 12-tap-per-phase interpolating low-pass (the Annex's
# example filter has 48 taps in 4 phases). This one has 49, so phase 0 passes the original
# samples through unchanged and the sample peak is never missed.
OVERSAMPLING = 4
TAPS_PER_PHASE = 12
KAISER_BETA = 6.0
# Samples handled per block by the true-peak filter (bounded memory on a long book).
BLOCK = 1 << 18
# The limiter's gain reaches its minimum over this long before and after a peak (a 5-ms
# look-ahead and hold: short enough to pass unnoticed on speech, long enough not to distort).
LIMITER_WINDOW_S = 0.005
# Gain passes until the loudness after limiting is this close to the target (LU).
LOUDNESS_TOLERANCE_LU = 0.05
MAX_PASSES = 4
# pyloudnorm's gating block: a signal shorter than this has no integrated loudness.
GATE_BLOCK_S = 0.4


def interpolator() -> np.ndarray:
    """The oversampling filter: a Kaiser-windowed sinc cut at the input's Nyquist frequency,
    OVERSAMPLING × TAPS_PER_PHASE + 1 taps, each phase summing to about 1."""
    count = OVERSAMPLING * TAPS_PER_PHASE + 1
    n = np.arange(count) - (count - 1) / 2
    taps = np.sinc(n / OVERSAMPLING) * np.kaiser(count, KAISER_BETA)
    # Normalised so a constant passes at its own level through every phase.
    return np.asarray(taps * OVERSAMPLING / taps.sum())


def oversampled_peaks(samples: np.ndarray) -> np.ndarray:
    """For each input sample, the largest absolute value of the 4×-oversampled signal among
    the sample itself and the three interpolated between it and the next. Computed per phase
    (each phase a 12- or 13-tap filter of the input), never as the zero-stuffed signal."""
    taps = interpolator()
    half = (taps.size - 1) // 2
    phases = []
    for phase in range(OVERSAMPLING):
        # y[4n + phase] = Σ_q taps[4q + phase + half] · x[n − q]
        qs = [q for q in range(-half, half + 1) if 0 <= OVERSAMPLING * q + phase + half < taps.size]
        phases.append((qs[0], taps[[OVERSAMPLING * q + phase + half for q in qs]]))
    pad = TAPS_PER_PHASE  # input samples of context on each side of a block
    # Blocks in double precision, the peaks kept in single: a long book's arrays stay 4 bytes
    # a sample.
    x = np.asarray(samples)
    peaks = np.empty(x.size, dtype=np.float32)
    for start in range(0, x.size, BLOCK):
        stop = min(x.size, start + BLOCK)
        lo, hi = max(0, start - pad), min(x.size, stop + pad)
        block = x[lo:hi].astype(np.float64)
        best = np.zeros(stop - start)
        for first, kernel in phases:
            full = np.convolve(block, kernel)
            wanted = full[start - lo - first : stop - lo - first]
            np.maximum(best, np.abs(wanted), out=best)
        peaks[start:stop] = best
    return peaks


def true_peak_dbtp(samples: np.ndarray) -> float:
    """The signal's true peak in dBTP (full scale 1.0); −inf for silence."""
    if samples.size == 0:
        return -math.inf
    peak = float(oversampled_peaks(samples).max())
    return 20 * math.log10(peak) if peak > 0 else -math.inf


def integrated_lufs(samples: np.ndarray, rate: int) -> float:
    """Gated integrated loudness of mono `samples` (full scale 1.0) in LUFS; −inf when the
    signal is silent or shorter than one gating block."""
    import pyloudnorm  # type: ignore[import-untyped]  # the audiobook extra

    if samples.size < GATE_BLOCK_S * rate:
        return -math.inf
    return float(pyloudnorm.Meter(rate).integrated_loudness(np.asarray(samples, np.float64)))


def limit(samples: np.ndarray, rate: int, ceiling_dbtp: float) -> np.ndarray:
    """`samples` with every stretch whose true peak passes the ceiling turned down just enough,
    the gain ramping over LIMITER_WINDOW_S either side; untouched elsewhere."""
    gain = reduction(oversampled_peaks(samples), ceiling_dbtp, int(LIMITER_WINDOW_S * rate))
    return samples if gain is None else np.asarray(samples * gain, dtype=np.float32)


def reduction(peaks: np.ndarray, ceiling_dbtp: float, width: int) -> np.ndarray | None:
    """The gain per sample (at most 1) that keeps `peaks` (each sample's true peak) under the
    ceiling, reaching each dip `width` samples before and leaving it `width` after; None when
    no sample needs one."""
    ceiling = 10 ** (ceiling_dbtp / 20)
    needed = np.minimum(1.0, ceiling / np.maximum(peaks, 1e-12)).astype(np.float32)
    if needed.min() >= 1.0:
        return None
    width = max(1, width)
    # A running minimum over ±width, then a running mean over ±width/2: every mean is over
    # values each at most the need at its centre, so the gain never exceeds what is needed.
    # Smoothed as the cut (1 − gain), which is exactly 0 wherever nothing is near: the rest of
    # the signal keeps its one gain to the last bit.
    cut = 1.0 - _running_min(needed, width)
    kernel = np.full(width, 1 / width, dtype=np.float32)
    padded = np.pad(cut, (width // 2, width - 1 - width // 2), mode="edge")
    return np.asarray(np.minimum(1.0 - np.convolve(padded, kernel, mode="valid"), needed))


def _running_min(values: np.ndarray, width: int) -> np.ndarray:
    """The minimum of `values` over [i − width, i + width] at each i (scipy's O(n) filter;
    scipy comes with pyloudnorm)."""
    from scipy.ndimage import minimum_filter1d  # type: ignore[import-untyped]

    return np.asarray(minimum_filter1d(values, size=2 * width + 1, mode="nearest"))


@dataclass(frozen=True)
class Normalised:
    """What the normalisation did: measured before and after, the gain, the limiting."""

    samples: np.ndarray
    measured_lufs: float  # the input's integrated loudness
    lufs: float  # the output's
    true_peak_dbtp: float  # the output's
    gain_db: float  # the book's one gain (before the limiter)
    limited: bool  # the limiter turned some peaks down


def normalise(
    samples: np.ndarray, rate: int, target_lufs: float, ceiling_dbtp: float
) -> Normalised:
    """One gain for the whole signal that brings its integrated loudness to `target_lufs`,
    with the true peak limited to `ceiling_dbtp`; the gain is raised again by what the
    limiter took off the loudness. A signal with no measurable loudness is returned as it is."""
    measured = integrated_lufs(samples, rate)
    if not math.isfinite(measured):
        peak = true_peak_dbtp(samples)
        return Normalised(samples, measured, measured, peak, 0.0, False)
    gain_db = target_lufs - measured
    out, limited, now = samples, False, measured
    for _ in range(MAX_PASSES):
        scaled = np.asarray(samples * 10 ** (gain_db / 20), dtype=np.float32)
        out = limit(scaled, rate, ceiling_dbtp)
        limited = limited or out is not scaled
        now = integrated_lufs(out, rate)
        if abs(now - target_lufs) <= LOUDNESS_TOLERANCE_LU:
            break
        gain_db += target_lufs - now
    peak = true_peak_dbtp(out)
    if peak > ceiling_dbtp:  # the limiter's ramps are a hair off: one static trim holds it
        out = np.asarray(out * 10 ** ((ceiling_dbtp - peak) / 20), dtype=np.float32)
        now, peak = integrated_lufs(out, rate), true_peak_dbtp(out)
    return Normalised(out, measured, now, peak, gain_db, limited)
