"""worker/qa/asr.py against a scripted /v1/audio/transcriptions (httpx.MockTransport): the
multipart request the OpenAI API defines, the JSON answer, and every failure as AsrError."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import httpx
import numpy as np
import pytest
import soundfile  # type: ignore[import-untyped]

from worker.qa.asr import AsrClient, AsrError

PCM = (np.sin(np.arange(24_000) / 10) * 8000).astype("<i2").tobytes()


def client(handler: Callable[[httpx.Request], httpx.Response]) -> AsrClient:
    transport = httpx.MockTransport(handler)
    return AsrClient("http://asr", "openai/whisper-large-v3-turbo", transport=transport)


def fields_of(request: httpx.Request) -> tuple[dict[str, str], bytes]:
    """The form fields and the file of a multipart request, parsed as a server would."""
    boundary = request.headers["content-type"].split("boundary=")[1].encode()
    fields: dict[str, str] = {}
    upload = b""
    for part in request.content.split(b"--" + boundary):
        head, _, body = part.partition(b"\r\n\r\n")
        body = body.removesuffix(b"\r\n")
        if b'name="file"' in head:
            upload = body
        elif b"name=" in head:
            name = head.split(b'name="')[1].split(b'"')[0].decode()
            fields[name] = body.decode()
    return fields, upload


def test_the_request_is_multipart_file_and_model_and_the_text_comes_back() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"text": " Hello there."})

    assert client(answer).transcribe(PCM, 24_000, "English") == " Hello there."
    [request] = seen
    assert request.method == "POST" and request.url.path == "/v1/audio/transcriptions"
    fields, upload = fields_of(request)
    assert fields == {"model": "openai/whisper-large-v3-turbo", "language": "en"}
    info = soundfile.info(io.BytesIO(upload))
    assert (info.samplerate, info.channels, info.frames) == (24_000, 1, 24_000)


def test_auto_sends_no_language() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"text": "x"})

    client(answer).transcribe(PCM, 24_000)
    assert "language" not in fields_of(seen[0])[0]


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (httpx.Response(500, json={"error": {"message": "CUDA out of memory"}}), "500: CUDA out"),
        (httpx.Response(404, json={"detail": "Not Found"}), "404: Not Found"),
        (httpx.Response(200, content=b"not json"), "not JSON"),
        (httpx.Response(200, content=json.dumps({"txt": "x"}).encode()), '"text"'),
    ],
)
def test_a_bad_answer_is_an_asr_error(response: httpx.Response, message: str) -> None:
    with pytest.raises(AsrError, match=message):
        client(lambda request: response).transcribe(PCM, 24_000)


def test_an_unreachable_server_is_an_asr_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with pytest.raises(AsrError, match="unreachable"):
        client(refuse).transcribe(PCM, 24_000)
