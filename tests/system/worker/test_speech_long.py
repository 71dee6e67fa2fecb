"""Long text comes out whole in every format: the client against a stand-in process.

The stand-in keeps the real talker's 4,096-token context, so a client that sent the text in
one piece (or pieces too big for CJK) would get the audio silently cut; and each piece's own
mp3 header would make decoders stop after the first piece.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
import soundfile

from tests.lib.procs import SpeechServer, start_speech_server
from tts_fleet.local.speech_backends import spoken_seconds
from worker.jobs import Job
from worker.speech import SpeechClient

pytestmark = pytest.mark.processes
SENTENCES = [
    "The committee met on a grey morning to discuss the harbour.",
    "Nobody expected the old lighthouse keeper to speak first!",
    "Was the budget large enough for a new breakwater?",
    "They argued until noon; then the rain came in.",
]
ENGLISH = " ".join(SENTENCES[i % 4] + f" Item {i}." for i in range(400))[:20_000]
CHINESE = ("今天的会议讨论了港口的未来。老灯塔看守人第一个发言！新的防波堤预算够吗？" * 90)[:3_000]


@pytest.fixture(scope="module")
def tone() -> Iterator[SpeechServer]:
    with start_speech_server("tone") as server:
        yield server


def decoded_seconds(audio: bytes, fmt: str) -> float:
    if fmt == "pcm":
        return len(audio) / 2 / 24_000
    info = soundfile.info(io.BytesIO(audio))  # libsndfile, as a player would read it
    assert info.samplerate == 24_000
    return info.duration


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3"])
@pytest.mark.parametrize("text", [ENGLISH, CHINESE], ids=["english-20k", "chinese-3k"])
def test_long_text_comes_out_whole(tone: SpeechServer, text: str, fmt: str) -> None:
    assert len(text) in (20_000, 3_000)
    language = "Chinese" if text is CHINESE else "English"
    speech = SpeechClient(tone.url).synthesize(Job(text=text, format=fmt, language=language))
    expected = spoken_seconds(text)  # the tone backend's length for the whole text
    seconds = decoded_seconds(speech.audio, fmt)
    assert seconds >= 0.95 * expected
    assert speech.duration_s == pytest.approx(seconds, abs=0.1)
    assert speech.pieces >= (20 if text is ENGLISH else 12)


def test_one_request_for_the_whole_text_would_be_cut(tone: SpeechServer) -> None:
    # What the test above guards against: the stand-in cuts what does not fit, with a 200.
    piece = CHINESE[:1_200]
    client = SpeechClient(tone.url, chunk_chars=100_000)
    body = client.payload(Job(text=piece, language="Chinese"), piece)
    pcm, headers = client._post(body)
    assert len(pcm) / 2 / 24_000 < 0.9 * spoken_seconds(piece)
    assert (
        int(headers["x-vllm-omni-input-tokens"]) + int(headers["x-vllm-omni-output-tokens"]) > 4_000
    )
