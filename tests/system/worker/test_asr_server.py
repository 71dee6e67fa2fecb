"""QA_MODE=asr in the GPU image: worker/entrypoint.sh with worker/asr_server.sh, run for real
with a stand-in `vllm` on PATH (it records its arguments, answers /health on the port it is
given and records SIGTERM) and a stand-in `python -m worker`. The ASR server starts after
vLLM-Omni is healthy and before the worker, on the loopback at 8092's stand-in port with its
share of the GPU; the stop covers both servers; an ASR server that dies fails the task. What
this cannot prove: that vLLM loads a Whisper model (no GPU here)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lib.entrypoint import Start, entrypoints, read, stand_ins, wait_for
from tests.system.components.test_worker_image_files import STAGE_OVERRIDES
from tts_fleet.local.procs import free_port

FAKE_VLLM = """#!{python}
import http.server, os, signal, sys, threading, time
port = int(sys.argv[sys.argv.index("--port") + 1])
name = "asr" if str(port) == os.environ["ASR_PORT"] else "tts"
def note(text):
    with open(os.environ["EVENTS"], "a") as f:
        f.write(text + "\\n")
note(name + "-start " + " ".join(sys.argv[1:]))
mode = os.environ.get(name.upper() + "_FAKE_MODE", "")
if mode == "crash":
    sys.exit(7)
def on_term(*_):
    note(name + "-term")
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
host = sys.argv[sys.argv.index("--host") + 1]
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
time.sleep(0.3)
server = http.server.HTTPServer((host, port), Health)
threading.Thread(target=server.serve_forever, daemon=True).start()
if mode == "die-after":
    time.sleep(float(os.environ["ASR_DIE_AFTER"]))
    note(name + "-died")
    os._exit(9)
while True:
    time.sleep(0.1)
"""

FAKE_WORKER = """import os, signal, time
def note(text):
    with open(os.environ["EVENTS"], "a") as f:
        f.write(text + "\\n")
note("worker-start " + os.environ.get("QA_MODE", "unset"))
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
while not stop:
    time.sleep(0.05)
note("worker-term")
note("worker-exit")
"""


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, str]:
    env = stand_ins(tmp_path, FAKE_VLLM, FAKE_WORKER)
    return {**env, "TMPDIR": str(tmp_path), "ASR_PORT": str(free_port()), "QA_MODE": "asr"}


@pytest.fixture
def start(sandbox: dict[str, str]) -> Iterator[Start]:
    with entrypoints(sandbox) as run:
        yield run


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_the_asr_server_starts_between_the_speech_server_and_the_worker_and_stops_with_them(
    start: Start, sandbox: dict[str, str]
) -> None:
    events = Path(sandbox["EVENTS"])
    proc = start()
    wait_for(events, "worker-start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    lines = read(events)
    tts_port, asr_port = sandbox["SPEECH_PORT"], sandbox["ASR_PORT"]
    assert lines[:3] == [
        f"tts-start serve Qwen/Test-Model --omni --host 127.0.0.1 --port {tts_port}"
        f" --stage-overrides {STAGE_OVERRIDES}",
        f"asr-start serve openai/whisper-large-v3-turbo --host 127.0.0.1 --port {asr_port}"
        " --gpu-memory-utilization 0.25",
        "worker-start asr",
    ]
    assert lines[3:5] == ["worker-term", "worker-exit"]
    assert sorted(lines[5:]) == ["asr-term", "tts-term"]  # both, after the worker


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_the_model_and_the_memory_share_are_the_environments(
    start: Start, sandbox: dict[str, str]
) -> None:
    events = Path(sandbox["EVENTS"])
    proc = start(ASR_MODEL="org/asr-small", ASR_GPU_MEMORY_UTILIZATION="0.2")
    wait_for(events, "worker-start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    [asr] = [line for line in read(events) if line.startswith("asr-start")]
    assert asr.endswith("serve org/asr-small --host 127.0.0.1 --port "
                        f"{sandbox['ASR_PORT']} --gpu-memory-utilization 0.2")  # fmt: skip


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_an_asr_server_that_dies_at_start_fails_the_task_without_a_worker(
    start: Start, sandbox: dict[str, str]
) -> None:
    events = Path(sandbox["EVENTS"])
    proc = start(ASR_FAKE_MODE="crash")
    assert proc.wait(timeout=60) == 1
    lines = read(events)
    assert not any(line.startswith("worker-start") for line in lines)
    assert lines[-1] == "tts-term"  # the speech server is stopped too


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_an_asr_server_dying_mid_run_stops_the_worker_and_fails_the_task(
    start: Start, sandbox: dict[str, str]
) -> None:
    events = Path(sandbox["EVENTS"])
    proc = start(ASR_FAKE_MODE="die-after", ASR_DIE_AFTER="2")
    assert proc.wait(timeout=60) == 1
    lines = read(events)
    assert lines.index("asr-died") < lines.index("worker-term") < lines.index("worker-exit")
    assert "tts-term" in lines


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_mode_basic_starts_no_asr_server(start: Start, sandbox: dict[str, str]) -> None:
    events = Path(sandbox["EVENTS"])
    proc = start(QA_MODE="basic")
    wait_for(events, "worker-start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert not any(line.startswith("asr-") for line in read(events))
