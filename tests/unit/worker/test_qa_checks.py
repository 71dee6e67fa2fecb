"""worker/qa/checks.py on real signals: synthesized tones, noise and silence with each fault
built in, and real speech from the espeak-ng stand-in (its clean readings must pass)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest

from worker.qa.checks import (
    CAP_SLACK_S,
    CLIPPED,
    CODEC_FRAME_RATE,
    NO_SIGNAL,
    RUNAWAY,
    SILENCE,
    TOO_LONG,
    TOO_SHORT,
    check_signal,
    duration_bounds,
    expected_seconds,
    max_new_tokens,
    measure,
    reached_cap,
)
from worker.speech import MAX_MODEL_LEN, PCM_RATE, speech_pieces

RATE = 24_000
TEXT = "The quick brown fox jumps over the lazy dog, and then it runs away."  # 68 characters


def tone(seconds: float, amplitude: float = 0.5, hz: float = 220.0) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return amplitude * np.sin(2 * np.pi * hz * t)


def quiet(seconds: float, level: float = 0.0, seed: int = 0) -> np.ndarray:
    """Digital silence, or white noise at RMS `level` (a room's noise floor)."""
    size = round(seconds * RATE)
    return np.random.default_rng(seed).normal(0, level, size) if level else np.zeros(size)


def checks_of(samples: np.ndarray, text: str = TEXT, speed: float = 1.0, **kw: object) -> set:
    frames = kw.get("frames")
    cap = kw.get("cap")
    signal = measure(samples, RATE)
    return {f.check for f in check_signal(text, signal, speed, frames, cap)}  # type: ignore[arg-type]


def speechlike(seconds: float, pause_every: float = 0.6, pause: float = 0.15) -> np.ndarray:
    """Bursts of tone with short pauses, as words come: `seconds` long."""
    parts: list[np.ndarray] = []
    total = 0.0
    while total < seconds:
        parts += [tone(pause_every), quiet(pause, 0.001)]
        total += pause_every + pause
    return np.concatenate(parts)[: round(seconds * RATE)]


# ---- expected duration and the ceiling ---------------------------------------------------


def test_expected_seconds_per_script_and_speed() -> None:
    assert expected_seconds("a" * 100) == pytest.approx(6.6)
    assert expected_seconds("a" * 100, speed=2.0) == pytest.approx(3.3)
    assert expected_seconds("中" * 10) == pytest.approx(2.5)
    assert expected_seconds("か" * 10) == pytest.approx(1.3)
    assert expected_seconds("한" * 10) == pytest.approx(1.7)
    # a digit is said as a word: three characters' worth
    assert expected_seconds("1984") == pytest.approx(4 * 3 * 0.066)


def test_a_clean_reading_of_the_expected_length_passes() -> None:
    assert checks_of(speechlike(expected_seconds(TEXT))) == set()


@pytest.mark.parametrize("speed", [0.5, 1.0, 2.0])
def test_duration_bounds_follow_the_speed(speed: float) -> None:
    expected = expected_seconds(TEXT, speed)
    assert checks_of(speechlike(expected), speed=speed) == set()
    low, high = duration_bounds(expected)
    assert checks_of(speechlike(high + 1.0), speed=speed) == {TOO_LONG}
    assert checks_of(speechlike(max(0.2, low - 0.3)), speed=speed) == {TOO_SHORT}


def test_a_truncated_reading_is_too_short() -> None:
    text = " ".join([TEXT] * 5)  # ~22 s
    whole = speechlike(expected_seconds(text))
    assert checks_of(whole, text) == set()
    assert checks_of(whole[: whole.size // 3], text) == {TOO_SHORT}


def test_the_ceiling_is_far_below_the_context_for_the_longest_piece_sent() -> None:
    # The longest pieces the worker asks for at the default SPEECH_CHUNK_CHARS (1,000).
    latin = speech_pieces("This is a sentence of a long chapter. " * 100, 1_000)[0]
    cjk = speech_pieces("这是一个很长的中文句子。" * 100, 1_000)[0]
    for piece in (latin, cjk):
        assert max_new_tokens(piece) < MAX_MODEL_LEN - 400  # room for the prompt


@pytest.mark.parametrize("text", ["Hi.", TEXT, "中文句子。" * 20, "word " * 200])
def test_a_finished_reading_never_reaches_the_ceiling(text: str) -> None:
    # The longest audio the duration bound accepts stays below the ceiling's frames.
    _, high = duration_bounds(expected_seconds(text))
    assert high * CODEC_FRAME_RATE < max_new_tokens(text)
    assert max_new_tokens(text) >= CAP_SLACK_S * CODEC_FRAME_RATE


def test_reaching_the_ceiling_is_a_runaway() -> None:
    cap = max_new_tokens(TEXT)
    babble = speechlike(cap / CODEC_FRAME_RATE)
    assert checks_of(babble, frames=cap, cap=cap) == {RUNAWAY}
    # without the server's token count: from the audio's length
    assert checks_of(babble, cap=cap) == {RUNAWAY}
    assert reached_cap(None, cap / CODEC_FRAME_RATE / 2, 2.0, cap)  # speed 2: half the audio
    assert not reached_cap(cap - 1, 100.0, 1.0, cap)  # the count, when sent, decides


def test_a_runaway_into_silence_is_caught_by_the_ceiling_and_the_silence() -> None:
    cap = max_new_tokens(TEXT)
    reading = speechlike(expected_seconds(TEXT))
    silent_tail = np.concatenate([reading, quiet(cap / CODEC_FRAME_RATE - reading.size / RATE)])
    assert checks_of(silent_tail, frames=cap, cap=cap) == {RUNAWAY, SILENCE}


# ---- silence ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gap", "bad"),
    [(0.5, False), (1.5, False), (2.5, True), (6.0, True)],
)
def test_a_long_pause_inside_is_silence(gap: float, bad: bool) -> None:
    half = speechlike(expected_seconds(TEXT) / 2)
    samples = np.concatenate([half, quiet(gap, 0.002), half])
    assert measure(samples, RATE).longest_silence_s == pytest.approx(gap, abs=0.2)
    assert (SILENCE in checks_of(samples)) is bad


def test_leading_and_trailing_silence() -> None:
    reading = speechlike(expected_seconds(TEXT))
    assert checks_of(np.concatenate([quiet(1.0), reading, quiet(1.5)])) == set()
    signal = measure(np.concatenate([quiet(2.0), reading]), RATE)
    assert signal.leading_silence_s == pytest.approx(2.0, abs=0.03)
    assert SILENCE in checks_of(np.concatenate([quiet(2.0), reading]))
    assert SILENCE in checks_of(np.concatenate([reading, quiet(3.0)]))


def test_slow_speech_may_pause_longer() -> None:
    half = speechlike(expected_seconds(TEXT, 0.5) / 2)
    samples = np.concatenate([half, quiet(3.0), half])
    assert SILENCE not in checks_of(samples, speed=0.5)
    assert SILENCE in checks_of(samples, speed=1.0)


def test_silence_is_relative_to_the_speech_over_a_noise_floor() -> None:
    # -50 dBFS room noise in the pause is still a pause; the same noise alone is no signal.
    half = tone(1.5)
    samples = np.concatenate([half, quiet(3.0, 0.003), half])
    assert measure(samples, RATE).longest_silence_s == pytest.approx(3.0, abs=0.1)
    assert checks_of(quiet(3.0, 0.0003)) == {NO_SIGNAL}


# ---- sanity -------------------------------------------------------------------------


def test_all_zero_nan_and_clipped_audio() -> None:
    assert checks_of(np.zeros(RATE * 4)) == {NO_SIGNAL}
    assert checks_of(np.zeros(RATE * 4, dtype=np.int16)) == {NO_SIGNAL}
    broken = speechlike(expected_seconds(TEXT))
    broken[100] = math.nan
    assert checks_of(broken) == {NO_SIGNAL}
    square = np.sign(speechlike(expected_seconds(TEXT)))  # every sample at full scale
    assert checks_of(square) == {CLIPPED}
    loud = np.clip(4.0 * speechlike(expected_seconds(TEXT)), -1.0, 1.0)  # peaks flattened
    assert CLIPPED in checks_of(loud)
    assert checks_of(0.99 * speechlike(expected_seconds(TEXT))) == set()


def test_int16_samples_are_read_at_full_scale() -> None:
    samples = (speechlike(2.0) * 32_767).astype(np.int16)
    signal = measure(samples, RATE)
    assert signal.peak == pytest.approx(0.5, abs=0.01)
    assert signal.seconds == pytest.approx(samples.size / RATE)


# ---- real speech: the espeak-ng stand-in ---------------------------------------------

# Sentences in the stand-in's languages (Japanese kana only: espeak-ng reads each kanji as
# the character's name, about 0.5 s, which no reading of the text takes).
SENTENCES = {
    "English": [
        "It was a bright cold day in April, and the clocks were striking thirteen.",
        "The station was empty except for an old man reading yesterday's paper.",
        "She counted 1,250 steps from the gate to the top of the tower.",
        "Nobody answered the door, so we waited in the rain for twenty minutes.",
        "In 1969, two people walked on the Moon for the first time.",
        "Please turn to page 42 and read the second paragraph aloud.",
    ],
    "German": [
        "Der Zug fuhr pünktlich um acht Uhr vom Hauptbahnhof ab.",
        "Im Winter liegt in den Bergen oft mehr als ein Meter Schnee.",
        "Sie las das Buch in einer einzigen Nacht zu Ende.",
    ],
    "French": [
        "Le petit café au coin de la rue ouvre à sept heures du matin.",
        "Nous avons marché le long de la rivière jusqu'au vieux moulin.",
        "Il faut toujours relire une lettre avant de l'envoyer.",
    ],
    "Spanish": [
        "El tren salió de la estación con diez minutos de retraso.",
        "Mi abuela cocinaba el mejor arroz con pollo del barrio.",
        "Las montañas estaban cubiertas de nieve hasta la primavera.",
    ],
    "Italian": [
        "Il mercato del sabato è pieno di frutta, verdura e fiori.",
        "Abbiamo visitato tre musei in un solo giorno a Firenze.",
    ],
    "Portuguese": [
        "A biblioteca da cidade fecha às seis horas da tarde.",
        "O barco atravessou o rio antes do pôr do sol.",
    ],
    "Russian": [
        "Поезд прибыл на станцию точно по расписанию.",
        "Зимой в этом городе очень холодно и много снега.",
    ],
    "Chinese": [
        "今天早上我们一起去公园散步。",
        "这本书讲的是一个小村庄的故事。",
        "火车在下午三点准时到达了车站。",
    ],
    "Korean": [
        "오늘 아침에 우리는 함께 공원을 산책했습니다.",
        "이 책은 작은 마을에 관한 이야기입니다.",
    ],
    "Japanese": ["おはようございます。", "ありがとうございました。"],
}


def espeak_corpus() -> Iterator[tuple[str, str, float]]:
    """(language, piece, speed): one to all of each language's sentences, at three speeds."""
    for language, sentences in SENTENCES.items():
        for count in range(1, len(sentences) + 1):
            for start in range(len(sentences)):
                piece = " ".join((sentences * 2)[start : start + count])
                for speed in (0.75, 1.0, 1.5):
                    yield language, piece, speed


@pytest.fixture(scope="module")
def espeak() -> object:
    from tts_fleet.local.speech_backends import EspeakBackend

    return EspeakBackend()


def test_clean_espeak_speech_passes_at_no_more_than_one_percent(espeak: object) -> None:
    from tts_fleet.local.speech_backends import EspeakBackend

    assert isinstance(espeak, EspeakBackend)
    rejected: list[str] = []
    corpus = list(espeak_corpus())
    for language, piece, speed in corpus:
        pcm = espeak.synthesize(piece, "Ryan", language, speed)
        samples = np.frombuffer(pcm, dtype="<i2")
        signal = measure(samples, espeak.sample_rate)
        cap = max_new_tokens(piece)
        frames = math.ceil(signal.seconds * speed * CODEC_FRAME_RATE)
        findings = check_signal(piece, signal, speed, frames, cap)
        if findings:
            rejected.append(f"{language} x{speed} {piece[:30]!r}: {findings}")
    assert len(corpus) >= 250
    assert len(rejected) <= len(corpus) // 100, rejected


def test_espeak_speech_with_each_fault_is_caught(espeak: object) -> None:
    from tts_fleet.local.speech_backends import EspeakBackend

    assert isinstance(espeak, EspeakBackend)
    text = " ".join(SENTENCES["English"][:4])
    pcm = espeak.synthesize(text, "Ryan", "English", 1.0)
    rate = espeak.sample_rate
    clean = np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32_768
    cap = max_new_tokens(text)

    def found(samples: np.ndarray, frames: int | None = None) -> set[str]:
        signal = measure(samples, rate)
        frames = frames or math.ceil(signal.seconds * CODEC_FRAME_RATE)
        return {f.check for f in check_signal(text, signal, 1.0, frames, cap)}

    assert found(clean) == set()
    babble = np.tile(clean, 4)[: round(cap / CODEC_FRAME_RATE * rate)]
    assert found(babble, frames=cap) == {RUNAWAY}
    assert found(clean[: clean.size // 3]) == {TOO_SHORT}
    middle = clean.size // 2
    gap = np.concatenate([clean[:middle], np.zeros(3 * rate), clean[middle:]])
    assert found(gap) == {SILENCE}
    assert rate != PCM_RATE  # measured at the stand-in's own rate, 22,050 Hz
