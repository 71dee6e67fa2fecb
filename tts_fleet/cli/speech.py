"""`tts-fleet speech-server`: the local vLLM-Omni stand-in (tts_fleet/local/speech_server.py;
`python -m tts_fleet.local.speech_server` takes the same options)."""

from __future__ import annotations

import errno
from typing import Any

import click

from tts_fleet.cli.errors import BadInput
from tts_fleet.local.speech_server import BackendMissing, fault_plan, serve, server_options


@click.command("speech-server")
@server_options
def speech_server(**options: Any) -> None:
    """Serve POST /v1/audio/speech, GET /health and GET /v1/audio/voices on this machine.

    Also POST /v1/audio/transcriptions (an ASR stand-in) on --asr-port. The first line printed
    is `listening on http://HOST:PORT`, the second `asr listening on http://HOST:PORT`.
    --faults makes a share of the pieces come out bad."""
    options["faults"] = fault_plan(options["faults"], options.pop("fault_seed"))
    try:
        serve(**options)
    except BackendMissing as error:
        raise BadInput(str(error)) from None
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise BadInput(
                f"port {options['port']} or --asr-port on {options['host']} is already in "
                "use; stop what listens there or pass --port 0 for free ones"
            ) from None
        raise
