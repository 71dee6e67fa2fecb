"""`tts-fleet speech-server`: the local vLLM-Omni stand-in (same options as
`python -m tts_fleet.local.speech_server`)."""

from __future__ import annotations

import errno
import sys

import click

from tts_fleet.cli.errors import BadInput


@click.command("speech-server")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8091, show_default=True, help="0 picks a free port")
@click.option(
    "--backend",
    type=click.Choice(["espeak", "tone", "piper"]),
    default="espeak",
    show_default=True,
    help="espeak: real speech via espeak-ng; tone: a sine tone as long as the text, "
    "FOR LOAD TESTS AND BENCHMARKS only; piper: a neural voice (needs the .[voice] extra)",
)
@click.option(
    "--latency-ms",
    type=float,
    default=0.0,
    show_default=True,
    help="added model time per request (simulates a GPU; used with tone)",
)
@click.option(
    "--batch-exponent",
    type=float,
    default=0.5,
    show_default=True,
    help="latency = latency-ms × concurrent_requests^X (0 = fixed)",
)
@click.option("--model", default=None, help="model name reported by /v1/models")
@click.option("--log-level", default="WARNING", show_default=True)
def speech_server(
    host: str,
    port: int,
    backend: str,
    latency_ms: float,
    batch_exponent: float,
    model: str | None,
    log_level: str,
) -> None:
    """Serve POST /v1/audio/speech, GET /health and GET /v1/audio/voices on this machine.

    The first line printed is `listening on http://HOST:PORT`."""
    from tts_fleet.local.speech_server import main

    argv = [
        "--host",
        host,
        "--port",
        str(port),
        "--backend",
        backend,
        "--latency-ms",
        str(latency_ms),
        "--batch-exponent",
        str(batch_exponent),
        "--log-level",
        log_level,
    ]
    if model:
        argv += ["--model", model]
    try:
        code = main(argv)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise BadInput(
                f"port {port} on {host} is already in use; stop what listens there or pass "
                "--port 0 for a free one"
            ) from None
        raise
    sys.exit(code)


def register(group: click.Group) -> None:
    group.add_command(speech_server)
