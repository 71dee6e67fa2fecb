"""The local stand-in's word timestamps (tts_fleet/local/speech_server.py): asked for with
`word_timestamps`, answered in the real server's header, read by the worker's client."""

from __future__ import annotations

import json

import httpx
import pytest

from tts_fleet.local.speech_server import (
    HTTPError,
    serve_in_thread,
    validate,
    word_timestamp_headers,
)
from worker.jobs import Job
from worker.settings import DEFAULT_MODEL
from worker.speech import SpeechClient


def test_the_stand_in_answers_word_timestamps_when_asked() -> None:
    text = "It's late, said Ann. Go home!"
    with serve_in_thread("tone") as server:
        body = {"input": text, "voice": "Ryan", "response_format": "pcm", "speed": 2.0}
        plain = httpx.post(f"{server.url}/v1/audio/speech", json=body)
        asked = httpx.post(f"{server.url}/v1/audio/speech", json={**body, "word_timestamps": True})
    assert "x-word-timestamps" not in plain.headers
    words = json.loads(asked.headers["x-word-timestamps"])
    assert [w["word"] for w in words] == ["It's", "late", "said", "Ann", "Go", "home"]
    # Milliseconds of the audio before the 2× time stretch, in order, inside it.
    before_stretch_ms = len(asked.content) / 2 / 24_000 * 2.0 * 1000
    ends = [w["end_ms"] for w in words]
    assert all(w["start_ms"] < w["end_ms"] for w in words) and ends == sorted(ends)
    assert ends[-1] <= before_stretch_ms


def test_word_timestamps_past_4kb_are_omitted_as_the_real_server_does() -> None:
    headers = word_timestamp_headers("word " * 200, 60.0, 1.0)
    assert list(headers) == ["X-Word-Timestamps-Omitted"]
    assert headers["X-Word-Timestamps-Omitted"].endswith("limit=4096")


def test_a_word_timestamps_that_is_no_boolean_is_refused() -> None:
    with pytest.raises(HTTPError, match="word_timestamps"):
        validate({"input": "Hi.", "word_timestamps": "yes"}, DEFAULT_MODEL)


def test_the_worker_gets_aligned_sentences_from_the_stand_in() -> None:
    with serve_in_thread("tone") as server:
        client = SpeechClient(server.url, word_timestamps=True)
        speech = client.synthesize(Job(text="First one here. And the second.", speed=1.5))
    assert [s.timing for s in speech.segments or []] == ["aligned", "aligned"]
    assert (speech.segments or [])[-1].end == pytest.approx(speech.duration_s, abs=0.001)
