"""Client for an OpenAI-compatible `POST /v1/audio/speech` (vLLM-Omni serving Qwen3-TTS).

Transient failures (connection refused, timeouts, 5xx, 429, and 401/403/404, which mean a
misconfigured server, route, model or proxy rather than a bad job) are retried a few times
and then raised as TransientSpeechError; anything else the server rejects (400/422: unknown
voice, bad language, instructions too long) is a PermanentSpeechError and never retried.

Long text is split on sentence boundaries into pieces that fit the talker's context (4,096
tokens of prompt plus 12.5 Hz codec frames, vllm_omni/deploy/qwen3_tts.yaml), with a budget
per script: a CJK character costs about four times a Latin one. Every piece is asked for as
16-bit PCM at 24 kHz; a piece the server cut short (HTTP 200, which it does silently at the
context limit) or refused as too long (500) is split again. The samples are joined and the
requested format encoded once, so an mp3 carries one header for the whole audio.

With output checks on (a `Guard`, worker/qa/guard.py), every request also carries a `seed` and
a `max_new_tokens` ceiling derived from the piece's text, and every piece's audio is checked
before the pieces are joined: a bad one is asked for again with the next seed, up to the
guard's retries (worker/qa/).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import re
import time
from dataclasses import dataclass, replace
from typing import Any

import httpx
import numpy as np
import soundfile  # type: ignore[import-untyped]

from worker.jobs import Job, QaRecord, Segment, VoiceUse, WordTime
from worker.qa.asr import AsrError
from worker.qa.checks import max_new_tokens, reached_cap
from worker.qa.guard import Attempt, Guard, Rendered, rejected_by, seed_for
from worker.text import error_message, halve, split_text
from worker.timings import TimedPiece, segments, word_times
from worker.voices import ResolvedVoice, VoiceError, VoiceLibrary

log = logging.getLogger("worker.speech")
# Every piece is requested at this rate, so the raw PCM needs no header to be read.
PCM_RATE = 24_000
# Talker stage max_model_len (vllm_omni/deploy/qwen3_tts.yaml): prompt tokens + codec frames.
MAX_MODEL_LEN = 4_096
# The prompt has tokens the usage header does not count (role header, codec prefix: ~11-16);
# a piece whose counted tokens come this close to the limit was stopped by it.
CONTEXT_MARGIN = 32
# A character of Han, kana or hangul costs ~0.75 token + ~3 codec frames, a Latin one
# ~0.25 + ~0.8: four times the budget.
WIDE_COST = 4
_WIDE = re.compile(
    r"[\u1100-\u11ff\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef]"
)
# Without usage headers: audio shorter than this per unit of cost is cut (speech runs at
# ~0.066 s per Latin character; this is three times faster than anyone speaks).
MIN_SECONDS_PER_COST = 0.02
MIN_COST_TO_JUDGE = 200
# Halving a piece this many times and still hitting the limit means the text is not speech.
MAX_SPLITS = 6
# response_format -> soundfile (format, subtype): the subtypes vLLM-Omni's encoder writes.
ENCODINGS = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III")}
# 4xx answers that are the server's (or its route's, model's, proxy's) fault, not the job's:
# releasing the job with a backoff loses nothing while someone fixes the deployment.
SERVER_SIDE_4XX = (401, 403, 404, 408, 429)
_TOO_LONG = re.compile(r"longer than the maximum model length")
# vLLM-Omni's answer (500) when a request with max_new_tokens ran out of it before end-of-speech
# (Qwen3TTSAdapter.validate_generation, Base task; CustomVoice returns the cut audio with 200).
_NO_END_OF_SPEECH = re.compile(r"did not emit codec EOS")
OUTPUT_TOKENS_HEADER = "x-vllm-omni-output-tokens"


class SpeechError(Exception):
    """A synthesis that failed; `transient` says whether trying later can help."""

    transient = False


class TransientSpeechError(SpeechError):
    transient = True


class PermanentSpeechError(SpeechError):
    pass


class PromptTooLongError(PermanentSpeechError):
    """The server refused a piece whose prompt alone exceeds the talker's context."""


class NoEndOfSpeechError(TransientSpeechError):
    """The server refused a generation that reached max_new_tokens without end-of-speech: a
    runaway. With a seed sent, asking again with the same one gives the same answer."""


@dataclass(frozen=True)
class Speech:
    audio: bytes
    sample_rate: int | None
    duration_s: float | None
    pieces: int
    qa: QaRecord | None = None  # the output checks (None when they are off)
    # Renderings checked and those a check rejected, by check name (the QA metrics).
    checked: int = 0
    rejected: int = 0
    rejected_by: dict[str, int] | None = None
    # Every sentence's place in `audio` (worker/timings.py), for the manifest.
    segments: list[Segment] | None = None
    voice: VoiceUse | None = None  # the library voice used (None: a checkpoint speaker)


def job_seed(job: Job, attempt: int) -> int:
    """The seed of `attempt` (0 for the first) of every piece of `job` with output checks on:
    the job's own `seed` first, when it names one; otherwise, and for every re-render, the
    checks' rule of one seed per job id and attempt (worker/qa/guard.py seed_for), keyed by
    that seed too. With the checks off a request carries the job's seed only when it names
    one (the request is otherwise as before the checks)."""
    if job.seed is None:
        return seed_for(job.job_id, attempt)
    return job.seed if attempt == 0 else seed_for(f"{job.job_id}#seed={job.seed}", attempt)


def text_cost(text: str) -> int:
    """A piece's share of the context budget, in Latin-character units."""
    return len(text) + (WIDE_COST - 1) * len(_WIDE.findall(text))


def speech_pieces(text: str, max_cost: int) -> list[str]:
    """The pieces a text is asked for in (worker/text.py's cuts by context cost), trimmed."""
    pieces = split_text(text, max_cost, text_cost)
    if len(pieces) == 1:
        return pieces
    return _trimmed(pieces)


def halves(text: str) -> list[str]:
    """Two pieces of about equal context cost, trimmed (one if the text cannot be cut)."""
    return _trimmed(halve(text, text_cost))


def _trimmed(pieces: list[str]) -> list[str]:
    return [piece.strip() for piece in pieces if piece.strip()]


def encode(pcm: bytes, fmt: str, rate: int = PCM_RATE) -> bytes:
    """16-bit mono PCM in the job's format, encoded once for the whole text."""
    if fmt == "pcm":
        return pcm
    container, subtype = ENCODINGS[fmt]
    samples = np.frombuffer(pcm, dtype="<i2")
    with io.BytesIO() as buffer:
        soundfile.write(buffer, samples, rate, format=container, subtype=subtype)
        return buffer.getvalue()


def was_cut(text: str, pcm: bytes, headers: httpx.Headers, speed: float, limit: int) -> bool:
    """Did the server stop this piece at the context limit (it still answers 200)?

    With the usage headers: text tokens + codec frames reached the limit less the prompt
    tokens the header leaves out. Without them: far less audio than the text takes to say.
    """
    counted = _header_int(headers, "x-vllm-omni-input-tokens")
    frames = _header_int(headers, OUTPUT_TOKENS_HEADER)
    if counted is not None and frames is not None:
        return counted + frames >= limit - CONTEXT_MARGIN
    cost = text_cost(text)
    seconds = len(pcm) / 2 / PCM_RATE * speed
    return cost >= MIN_COST_TO_JUDGE and seconds < cost * MIN_SECONDS_PER_COST


def _header_int(headers: httpx.Headers, name: str) -> int | None:
    try:
        return int(headers[name])
    except (KeyError, ValueError):
        return None


class SpeechClient:
    """Thread-safe: one httpx.Client (connection pool) shared by every job thread."""

    def __init__(
        self,
        base_url: str,
        model: str = "",
        task_type: str = "",
        timeout_s: float = 600.0,
        retries: int = 2,
        chunk_chars: int = 1_000,
        retry_delay_s: float = 0.5,
        max_model_len: int = MAX_MODEL_LEN,
        transport: httpx.BaseTransport | None = None,
        guard: Guard | None = None,
        word_timestamps: bool = False,
        voices: VoiceLibrary | None = None,
    ) -> None:
        """`transport`: httpx's (default, a connection pool); a test passes an
        `httpx.MockTransport` to answer in process. `guard`: the output checks (None: off).
        `voices`: the library a Base or VoiceDesign stack's jobs name (worker/voices.py)."""
        self.voices = voices
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.task_type = task_type
        self.retries = retries
        # The piece budget in Latin characters; a CJK piece gets a quarter of it.
        self.chunk_chars = chunk_chars
        self.retry_delay_s = retry_delay_s
        self.max_model_len = max_model_len
        self.transport = transport
        self.guard = guard
        # Ask for the forced aligner's word timestamps (WORD_TIMESTAMPS=on: only a server
        # started with --forced-aligner accepts the field; any other answers 400).
        self.word_timestamps = word_timestamps
        timeout = httpx.Timeout(timeout_s, connect=5.0)
        self._http = httpx.Client(timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def healthy(self) -> bool:
        try:
            return self._http.get(f"{self.base_url}/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout_s: float, interval_s: float = 0.5) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval_s)
        return True

    def synthesize(self, job: Job) -> Speech:
        use = self._library_voice(job)[1] if self._uses_library() else None
        speech = self._synthesize(job)
        return speech if use is None else replace(speech, voice=use)

    def _uses_library(self) -> bool:
        return self.voices is not None and self.voices.active

    def _library_voice(self, job: Job) -> tuple[dict[str, Any], VoiceUse]:
        """The request fields and the record of the library voice the job names."""
        resolved = self._resolve(job)
        return resolved.fields, resolved.use

    def _library_voice_prompt(self, job: Job) -> tuple[str, int]:
        """The text a library voice adds to the prompt, and its clip's codec frames."""
        resolved = self._resolve(job)
        said = str(resolved.fields.get("ref_text", resolved.fields.get("instructions", "")))
        return said, resolved.reference_frames

    def _resolve(self, job: Job) -> ResolvedVoice:
        """The library voice the job names (read once per task: the library caches it). A
        voice that is not there, or not of this task type, fails the job; a read that failed
        is tried again later."""
        assert self.voices is not None
        try:
            return self.voices.resolve(job.voice, job.instructions)
        except VoiceError as error:
            if error.transient:
                raise TransientSpeechError(str(error)) from None
            raise PermanentSpeechError(str(error)) from None

    def _synthesize(self, job: Job) -> Speech:
        rendered: list[Rendered] = []
        for piece in speech_pieces(job.text, self.chunk_chars):
            rendered.extend(self._piece(job, piece, splits=0))
            if self.guard is not None and self.guard.stops_at(rendered[-1]):
                break  # the job fails on this piece: the rest would be rendered for nothing
        pcm = b"".join(r.pcm for r in rendered)
        audio = encode(pcm, job.format)
        seconds = len(pcm) / 2 / PCM_RATE
        timed = [TimedPiece(r.text, r.pcm, r.words) for r in rendered]
        spans = segments(job.text, timed, PCM_RATE, text_cost)
        if self.guard is None:
            return Speech(audio, PCM_RATE, seconds, len(rendered), segments=spans)
        records = [r.qa for r in rendered if r.qa is not None]
        return Speech(
            audio,
            PCM_RATE,
            seconds,
            len(rendered),
            qa=self.guard.report(rendered),
            checked=sum(r.attempts for r in records),
            rejected=sum(r.attempts - r.passed for r in records),
            rejected_by=rejected_by(rendered),
            segments=spans,
        )

    def _piece(self, job: Job, text: str, splits: int) -> list[Rendered]:
        """PCM of one piece, in as many requests as it takes to get none cut short (and, with
        checks on, one that passes them, or the guard's retries spent)."""
        if self.guard is not None:
            return self._checked_piece(job, text, splits, self.guard)
        try:
            pcm, headers = self._with_retries(self.payload(job, text, seed=job.seed))
        except PromptTooLongError as error:
            return self._split_again(job, text, splits, str(error))
        if was_cut(text, pcm, headers, job.speed, self.max_model_len):
            return self._split_again(job, text, splits, "the server cut its audio short")
        return [Rendered(pcm, text=text, words=word_times(headers, job.speed))]

    def _checked_piece(self, job: Job, text: str, splits: int, guard: Guard) -> list[Rendered]:
        cap, clamped = self.frame_ceiling(job, text)
        attempts: list[Attempt] = []
        heard: dict[int, tuple[WordTime, ...] | None] = {}  # seed -> its word timestamps
        for attempt in range(guard.attempts):
            seed = job_seed(job, attempt)
            payload = self.payload(job, text, seed=seed, max_new_tokens=cap)
            try:
                pcm, headers = self._with_retries(payload)
            except PromptTooLongError as error:
                return self._split_again(job, text, splits, str(error))
            except NoEndOfSpeechError as error:
                attempts.append(guard.ran_away(text, job.speed, seed, str(error)))
                continue
            frames = _header_int(headers, OUTPUT_TOKENS_HEADER)
            heard[seed] = word_times(headers, job.speed)
            seconds = len(pcm) / 2 / PCM_RATE
            # A ceiling lowered to fit the context is the context limit: the text is too long.
            context_cut = clamped and reached_cap(frames, seconds, job.speed, cap)
            if context_cut or was_cut(text, pcm, headers, job.speed, self.max_model_len):
                return self._split_again(job, text, splits, "the server cut its audio short")
            try:
                result = guard.judge(job, text, pcm, PCM_RATE, frames, cap, seed)
            except AsrError as error:
                raise TransientSpeechError(f"transcript check: {error}") from None
            attempts.append(result)
            if result.passed:
                break
            found = "; ".join(map(str, result.findings))
            log.warning("piece of %d characters rejected (seed %d): %s", len(text), seed, found)
        chosen = guard.chosen(text, attempts)
        used = next((a.seed for a in attempts if a.pcm is chosen.pcm), None)
        words = heard.get(used) if used is not None else None
        return [dataclasses.replace(chosen, words=words)]

    def frame_ceiling(self, job: Job, text: str) -> tuple[int, bool]:
        """`max_new_tokens` for a piece, and whether the talker's context lowered it: the
        checks' ceiling (worker/qa/checks.py), kept below the context less the prompt (text
        and instructions at a generous 4 Latin or 1 CJK character a token, and the margin)."""
        prompt = (text_cost(text) + text_cost(job.instructions)) // 4 + 1
        if self._uses_library():  # the voice's transcript or description, and its clip
            fields, voice = self._library_voice_prompt(job)
            prompt += text_cost(fields) // 4 + voice
        room = self.max_model_len - prompt - CONTEXT_MARGIN
        wanted = max_new_tokens(text)
        if wanted <= room:
            return wanted, False
        return max(1, room), True

    def _split_again(self, job: Job, text: str, splits: int, why: str) -> list[Rendered]:
        two = halves(text)
        if splits >= MAX_SPLITS or len(two) < 2:
            raise PermanentSpeechError(
                f"a piece of {len(text)} characters does not fit the model after "
                f"{splits} splits: {why}"
            )
        log.warning("piece of %d characters split again: %s", len(text), why)
        return [piece for half in two for piece in self._piece(job, half, splits + 1)]

    def payload(
        self,
        job: Job,
        text: str,
        seed: int | None = None,
        max_new_tokens: int | None = None,
        voice_fields: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The request body for one piece (always PCM at PCM_RATE; the job's format is ours),
        with the checks' seed and frame ceiling when they are on. `voice_fields` stand for a
        library voice (the start-up probe's own); by default the job's is looked up."""
        payload: dict[str, Any] = {
            "input": text,
            "voice": job.voice,
            "language": job.language,
            "response_format": "pcm",
            "sample_rate": PCM_RATE,
            "speed": job.speed,
        }
        if self.model:
            payload["model"] = self.model
        if job.instructions:
            payload["instructions"] = job.instructions
        if self.task_type:
            payload["task_type"] = self.task_type
        if voice_fields is None and self._uses_library():
            voice_fields = self._library_voice(job)[0]
        if voice_fields is not None:
            # A library voice is its reference (Base) or its description (VoiceDesign), never
            # a speaker name: the server would take a name for one of its own stored voices.
            del payload["voice"]
            payload.update(voice_fields)
        if seed is not None:
            payload["seed"] = seed
        if max_new_tokens is not None:
            payload["max_new_tokens"] = max_new_tokens
        if self.word_timestamps:
            payload["word_timestamps"] = True
        return payload

    def _with_retries(self, payload: dict[str, Any]) -> tuple[bytes, httpx.Headers]:
        for attempt in range(self.retries + 1):
            try:
                return self._post(payload)
            except TransientSpeechError as error:
                # A seeded runaway runs away again with that seed; the guard's next one may not.
                seeded_runaway = isinstance(error, NoEndOfSpeechError) and "seed" in payload
                if attempt == self.retries or seeded_runaway:
                    raise
                time.sleep(self.retry_delay_s * 2**attempt)
        raise AssertionError("unreachable")

    def _post(self, payload: dict[str, Any]) -> tuple[bytes, httpx.Headers]:
        url = f"{self.base_url}/v1/audio/speech"
        try:
            response = self._http.post(url, json=payload)
        except httpx.TimeoutException as error:
            raise TransientSpeechError(f"speech server timed out: {error!r}") from None
        except httpx.TransportError as error:
            raise TransientSpeechError(f"speech server unreachable: {error!r}") from None
        if response.status_code == 200:
            return response.content, response.headers
        detail = error_message(response)
        message = f"speech server answered {response.status_code}: {detail}"
        if response.status_code == 500 and _TOO_LONG.search(detail):
            raise PromptTooLongError(message)
        if response.status_code == 500 and _NO_END_OF_SPEECH.search(detail):
            raise NoEndOfSpeechError(message)
        if response.status_code >= 500 or response.status_code in SERVER_SIDE_4XX:
            raise TransientSpeechError(message)
        raise PermanentSpeechError(message)
