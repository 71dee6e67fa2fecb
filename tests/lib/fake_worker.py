"""A `Worker` run in a thread of the test process with a stand-in speech client, so a race
can be forced at the exact step it needs; the queue, bucket and S3/SQS calls are the emulator's."""

from __future__ import annotations

import io
import json
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np

from tests.lib.procs import wait_for
from worker.jobs import Job, Manifest, audio_key, manifest_key
from worker.loop import Worker
from worker.metrics import Metrics
from worker.protection import Protection
from worker.qa.checks import CODEC_FRAME_RATE, expected_seconds
from worker.qa.guard import Guard
from worker.settings import DEFAULT_MODEL, Settings
from worker.speech import PCM_RATE, Speech, SpeechClient


def fake_audio(job: Job) -> bytes:
    """The stand-in's audio for a job: it names the text, so a test can tell which it is."""
    return b"RIFF" + job.text.encode()


class FakeSpeech:
    """Takes `delay` seconds (per job id when a dict), then runs `during` if given."""

    def __init__(self, delay: float | dict[str, float] = 0.2, during: Any = None) -> None:
        self.delay, self.during = delay, during
        self.calls: list[str] = []  # the texts synthesized, in order

    def synthesize(self, job: Job) -> Speech:
        self.calls.append(job.text)
        delay = self.delay if isinstance(self.delay, float) else self.delay[job.job_id]
        time.sleep(delay)
        if self.during is not None:
            self.during(job)
        return Speech(fake_audio(job), 24_000, 1.0, 1)


def manifest_of(job: Job, worker: str = "peer", **fields: Any) -> Manifest:
    """The manifest a worker serving DEFAULT_MODEL writes for `job` (fields override)."""
    values: dict[str, Any] = dict(
        id=job.job_id, request=job.request(), audio_key=audio_key(job.job_id, job.format),
        duration_s=1.0, sample_rate=24_000, model=DEFAULT_MODEL, voice=job.voice, synth_s=0.1,
        queue_wait_s=0.0, attempts=1, pieces=1, worker=worker,
        finished_at="2026-01-01T00:00:00.000+00:00",
        request_hash=job.request_hash(DEFAULT_MODEL),
    )  # fmt: skip
    values.update(fields)
    return Manifest(**values)


def put_outputs(s3: Any, bucket: str, job: Job, worker: str = "peer", **fields: Any) -> Manifest:
    """What a worker that finished `job` leaves behind: its audio, then its manifest."""
    manifest = manifest_of(job, worker, **fields)
    s3.put_object(Bucket=bucket, Key=manifest.audio_key, Body=fake_audio(job))
    s3.put_object(Bucket=bucket, Key=manifest_key(job.job_id), Body=manifest.to_json())
    return manifest


class BlockingSpeech:
    """Synthesizes the jobs in `block` only when `go` is set (or after 60 s); others at once."""

    def __init__(self, block: set[str]) -> None:
        self.block, self.go = block, threading.Event()

    def synthesize(self, job: Job) -> Speech:
        if job.job_id in self.block:
            self.go.wait(60)
        return Speech(b"RIFFfake", 24_000, 1.0, 1)


def make_worker(names: dict[str, str], sqs: Any, s3: Any, speech: Any, **overrides: Any) -> Worker:
    values: dict[str, Any] = dict(
        queue_url=names["queue_url"],
        dlq_url=names["dlq_url"],
        output_bucket=names["bucket"],
        wait_time_seconds=1,
        visibility_timeout=30,
        heartbeat_seconds=10,
        stop_timeout_seconds=5,
        retry_base_seconds=1,
        retry_max_seconds=2,
        worker_id="w",
    )
    metrics = overrides.pop("metrics", None) or Metrics(io.StringIO())
    protection = overrides.pop("protection", None) or Protection("")
    delete_sqs = overrides.pop("delete_sqs", None)
    values.update(overrides)
    return Worker(Settings(**values), sqs, s3, speech, protection, metrics, delete_sqs)


def run_until(worker: Worker, done: Any, timeout: float = 30) -> None:
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(done, timeout)
    finally:
        worker.request_stop()
        thread.join(60)
    assert not thread.is_alive()


# ---- a speech server with faults, for the output checks (worker/qa/) -----------------------


def reading(seconds: float) -> np.ndarray:
    """Word-like bursts of a 200-Hz tone, `seconds` long, as 16-bit samples at 24 kHz: what
    the checks take for a clean reading of a text expected to last that long."""
    t = np.arange(round(seconds * PCM_RATE)) / PCM_RATE
    on = (t % 0.5) < 0.4
    return (on * 9000 * np.sin(2 * np.pi * 200 * t)).astype("<i2")


# A fault: (request body, clean audio) -> (audio answered, codec frames reported or None).
Fault = Callable[[dict[str, Any], np.ndarray], tuple[np.ndarray, int | None]]
NO_END_OF_SPEECH = "no-eos"  # the server's own refusal of a runaway (a 500)


def clean(body: dict[str, Any], audio: np.ndarray) -> tuple[np.ndarray, int | None]:
    return audio, None


def runaway(body: dict[str, Any], audio: np.ndarray) -> tuple[np.ndarray, int | None]:
    """No end of speech: generation runs to the ceiling it was sent (else the server's own,
    2,048 frames: Qwen3TTSAdapter's default max_new_tokens)."""
    cap = int(body.get("max_new_tokens", 2048))
    babble = np.tile(audio, 20)[: round(cap / CODEC_FRAME_RATE * PCM_RATE)]
    return babble, cap


def truncate(body: dict[str, Any], audio: np.ndarray) -> tuple[np.ndarray, int | None]:
    return audio[: audio.size // 4], None


def long_pause(body: dict[str, Any], audio: np.ndarray) -> tuple[np.ndarray, int | None]:
    half = audio.size // 2
    return np.concatenate([audio[:half], np.zeros(4 * PCM_RATE, "<i2"), audio[half:]]), None


class FaultyTts:
    """An `httpx.MockTransport` handler for /v1/audio/speech: a clean reading of each piece,
    or the fault scripted for its seed (`faults`), else `default`. Thread-safe enough for a
    worker's job threads: it only appends to `bodies`."""

    def __init__(
        self, faults: dict[int, Fault | str] | None = None, default: Fault = clean
    ) -> None:
        self.faults = faults or {}
        self.default = default
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        audio = reading(expected_seconds(body["input"], body["speed"]))
        fault = self.faults.get(body.get("seed", -1), self.default)
        if isinstance(fault, str):  # NO_END_OF_SPEECH
            cap = body["max_new_tokens"]
            message = (
                "Qwen3-TTS Base did not emit codec EOS before its token budget "
                f"({cap}/{cap} codec tokens); the generated audio is incomplete."
            )
            return httpx.Response(500, json={"error": {"message": message}})
        samples, frames = fault(body, audio)
        if frames is None:
            frames = math.ceil(samples.size / PCM_RATE * body["speed"] * CODEC_FRAME_RATE)
        headers = {"X-VLLM-OMNI-INPUT-TOKENS": "20", "X-VLLM-OMNI-OUTPUT-TOKENS": str(frames)}
        return httpx.Response(200, content=samples.tobytes(), headers=headers)

    def seeds(self) -> list[int]:
        return [int(body["seed"]) for body in self.bodies]

    def client(self, guard: Guard | None, chunk_chars: int = 80) -> SpeechClient:
        """A speech client answered by this server in process."""
        transport = httpx.MockTransport(self)
        return SpeechClient("http://tts", chunk_chars=chunk_chars, transport=transport, guard=guard)
