"""worker/entrypoint.sh run for real with stand-ins for the two programs it supervises.

`vllm` is a small Python script on PATH that records its arguments, answers /health and
records SIGTERM (and can crash at start, die mid-run or ignore SIGTERM); `python -m worker`
resolves to a stand-in package in a temp dir that records start, the stop budget it was
handed, SIGTERM and exit (and can drain forever). The events file gives the order. What this
cannot prove: that the real vLLM-Omni accepts `--omni` (no GPU here), nor the Dockerfile
build (no Docker engine here).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.image import PRINT_LAYERS
from tests.lib.entrypoint import ENTRYPOINT, Start, entrypoints, read, stand_ins, wait_for
from tests.unit.components.test_worker_image_files import weights_step

# vLLM listens on loopback only: the worker beside it is its one client. The talker's graph
# sizes and both stages' max_num_seqs follow CONCURRENCY (4 by default: worker/vllm_args.py).
STAGE_OVERRIDES = (
    '{"0":{"max_num_seqs":4,"compilation_config":{"cudagraph_capture_sizes":[1,2,4]}},'
    '"1":{"max_num_seqs":4}}'
)
VLLM_START = (
    "vllm-start serve Qwen/Test-Model --omni --host 127.0.0.1 --port {port} --stage-overrides "
    + STAGE_OVERRIDES.replace("{", "{{").replace("}", "}}")
)
FAKE_VLLM = """#!{python}
import http.server, os, signal, sys, threading, time
events = os.environ["EVENTS"]
def note(text):
    with open(events, "a") as f:
        f.write(text + "\\n")
note("vllm-start " + " ".join(sys.argv[1:]))
mode = os.environ.get("VLLM_MODE", "")
if mode == "crash":
    sys.exit(7)
def on_term(*_):
    note("vllm-term")
    if mode != "stubborn":  # stubborn: a server that ignores SIGTERM (stuck CUDA teardown)
        os._exit(0)
signal.signal(signal.SIGTERM, on_term)
host = sys.argv[sys.argv.index("--host") + 1]
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
time.sleep(0.5)  # a model load takes a while
server = http.server.HTTPServer((host, port), Health)  # fails if --host is dropped
threading.Thread(target=server.serve_forever, daemon=True).start()
if mode == "die-after":  # the engine dies mid-run
    time.sleep(float(os.environ["VLLM_DIE_AFTER"]))
    note("vllm-died")
    os._exit(9)
while True:
    time.sleep(0.1)
"""

FAKE_WORKER = """import os, signal, sys, time
events = os.environ["EVENTS"]
def note(text):
    with open(events, "a") as f:
        f.write(text + "\\n")
note("worker-start")
note("worker-budget " + os.environ.get("STOP_TIMEOUT_SECONDS", "unset"))
time.sleep(float(os.environ.get("WORKER_IMPORT_SECONDS", "0")))  # before any handler
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
while not stop:
    time.sleep(0.05)
note("worker-term")
while os.environ.get("WORKER_MODE") == "stubborn":  # a drain that never ends
    time.sleep(0.05)
time.sleep(0.3)  # drain in-flight jobs
note("worker-exit")
sys.exit(int(os.environ.get("WORKER_EXIT", "0")))
"""


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, str]:
    return stand_ins(tmp_path, FAKE_VLLM, FAKE_WORKER)


@pytest.fixture
def start(sandbox: dict[str, str]) -> Iterator[Start]:
    with entrypoints(sandbox) as run:
        yield run


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_sigterm_reaches_the_worker_first_and_vllm_is_stopped_after(
    start: object, sandbox: dict[str, str]
) -> None:
    events = Path(sandbox["EVENTS"])
    proc = start(WORKER_EXIT="0")  # type: ignore[operator]
    wait_for(events, "worker-start")
    assert read(events)[0] == VLLM_START.format(port=sandbox["SPEECH_PORT"])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert read(events) == [
        VLLM_START.format(port=sandbox["SPEECH_PORT"]),
        "worker-start",
        "worker-budget 109.0",  # 120 s: 10 for vLLM, 1 of slack, the rest the worker's
        "worker-term",
        "worker-exit",
        "vllm-term",
    ]


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_the_worker_exit_code_is_the_containers(start: object, sandbox: dict[str, str]) -> None:
    events = Path(sandbox["EVENTS"])
    proc = start(WORKER_EXIT="3")  # type: ignore[operator]
    wait_for(events, "worker-start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 3
    assert read(events)[-1] == "vllm-term"


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_speech_server_that_dies_before_health_fails_fast_without_a_worker(
    start: object, sandbox: dict[str, str]
) -> None:
    proc = start(VLLM_MODE="crash")  # type: ignore[operator]
    assert proc.wait(timeout=60) == 1
    assert read(Path(sandbox["EVENTS"])) == [VLLM_START.format(port=sandbox["SPEECH_PORT"])]


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_vllm_dying_mid_run_stops_the_worker_and_fails_the_task(
    start: object, sandbox: dict[str, str]
) -> None:
    events = Path(sandbox["EVENTS"])
    # 4 s: the worker must be up first (its interpreter starts slowly on a loaded machine).
    proc = start(VLLM_MODE="die-after", VLLM_DIE_AFTER="4", WORKER_EXIT="0")  # type: ignore[operator]
    # The worker drains and exits 0; ECS must still see a failure, not a clean stop.
    assert proc.wait(timeout=60) == 1
    assert read(events)[-3:] == ["vllm-died", "worker-term", "worker-exit"]


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_durations_with_decimals_are_read(start: object, sandbox: dict[str, str]) -> None:
    events = Path(sandbox["EVENTS"])
    proc = start(HEALTH_TIMEOUT_SECONDS="60.5", STOP_TIMEOUT_SECONDS="30.5")  # type: ignore[operator]
    wait_for(events, "worker-start")
    # 30.5 s: vLLM gets a quarter (7.6 s, under its default 10), 1 s of slack, 21.9 s left.
    wait_for(events, "worker-budget 21.9")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


@pytest.mark.processes
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["HEALTH_TIMEOUT_SECONDS", "STOP_TIMEOUT_SECONDS"])
def test_a_duration_that_is_not_a_number_exits_2_with_one_line(
    sandbox: dict[str, str], name: str
) -> None:
    env = {**os.environ, **sandbox, name: "15m"}
    result = subprocess.run(
        ["bash", str(ENTRYPOINT)], env=env, cwd=sandbox["CWD"], capture_output=True, timeout=30
    )
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        f"entrypoint: {name}='15m' must be a number of seconds"
    ]
    assert read(Path(sandbox["EVENTS"])) == []  # nothing was started


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_the_whole_stop_fits_the_stop_budget(start: object, sandbox: dict[str, str]) -> None:
    """A worker whose drain never ends and a vLLM that ignores SIGTERM: both are killed in
    time for the container to be out inside stopTimeout, which ECS would end with SIGKILL."""
    events = Path(sandbox["EVENTS"])
    proc = start(  # type: ignore[operator]
        STOP_TIMEOUT_SECONDS="4",
        VLLM_STOP_SECONDS="1",
        WORKER_MODE="stubborn",
        VLLM_MODE="stubborn",
    )
    wait_for(events, "worker-budget 2.0")  # 4 s less 1 for vLLM and 1 of slack
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    status = proc.wait(timeout=60)
    elapsed = time.monotonic() - sent
    assert status == 128 + signal.SIGKILL  # the worker's: killed at the end of its share
    assert 2.0 < elapsed < 4.0, elapsed
    assert read(events)[-2:] == ["worker-term", "vllm-term"]


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_stop_while_the_worker_starts_still_drains_it(
    start: object, sandbox: dict[str, str]
) -> None:
    """SIGTERM before the worker has its handlers (Python starting, imports): not a -15."""
    events = Path(sandbox["EVENTS"])
    proc = start(WORKER_IMPORT_SECONDS="1.5")  # type: ignore[operator]
    wait_for(events, "worker-start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert read(events)[-3:] == ["worker-term", "worker-exit", "vllm-term"]


# ── the Dockerfile's weights step and the buildspec's layer report, run by a shell ─────────

RECORDER = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
"""


def recording_path(tmp_path: Path, *names: str) -> dict[str, str]:
    """A PATH whose `names` only record how they were called (into $CALLS)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(tmp_path / "calls")}


@pytest.mark.processes
@pytest.mark.parametrize(
    ("weights", "asr_model", "status", "downloads"),
    [
        ("s3", "", 0, 0),
        ("image", "", 0, 1),
        ("both", "", 1, 0),
        ("s3", "openai/whisper-large-v3-turbo", 0, 1),  # the recognizer only
        ("image", "openai/whisper-large-v3-turbo", 0, 2),
    ],
)
def test_the_weights_step_downloads_only_with_weights_image(
    tmp_path: Path, weights: str, asr_model: str, status: int, downloads: int
) -> None:
    """The RUN as the builder runs it (`/bin/sh -c`, build args in the environment), with a
    python3 that only records: WEIGHTS=s3 never reaches for the hub, the recognizer of
    `worker.qa.mode: asr` (ASR_MODEL) is fetched by the same code either way."""
    env = {
        **recording_path(tmp_path, "python3"),
        "WEIGHTS": weights,
        "MODEL": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
        "MODEL_REVISION": "0c0e3051f131929182e2c023b9537f8b1c68adfe",
        "ASR_MODEL": asr_model,
        "ASR_MODEL_REVISION": "ab" * 20 if asr_model else "",
    }
    result = subprocess.run(
        ["/bin/sh", "-c", weights_step().removeprefix("RUN ")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == status, result.stderr
    calls = Path(env["CALLS"]).read_text() if Path(env["CALLS"]).exists() else ""
    downloaded = [call for call in calls.splitlines() if "snapshot_download(" in call]
    assert len(downloaded) == downloads
    if status:
        assert result.stderr == "WEIGHTS must be image or s3, not 'both'\n"


@pytest.mark.processes
def test_the_build_prints_each_layer_s_compressed_size(tmp_path: Path) -> None:
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "size": size}
            for size in (29_150_000, 1_402_000_000, 9_800)
        ],
    }
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    aws = bin_dir / "aws"  # `--query ... --output text` prints the manifest string itself
    aws.write_text(f'#!/bin/sh\necho "$*" > {tmp_path / "args"}\ncat {tmp_path / "m.json"}\n')
    aws.chmod(0o755)
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "REPOSITORY_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/tts-dev-image",
        "IMAGE_TAG": "1f2e3d4c5b6a79881726",
        "CODEBUILD_BUILD_SUCCEEDING": "1",
    }
    result = subprocess.run(
        ["bash", "-c", PRINT_LAYERS], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "layer 1 29.1 MB",
        "layer 2 1402.0 MB",
        "layer 3 0.0 MB",
        "image 1.43 GB compressed",
    ]
    args = (tmp_path / "args").read_text()
    assert "--repository-name tts-dev-image --image-ids imageTag=1f2e3d4c5b6a79881726" in args
    failed = subprocess.run(
        ["bash", "-c", PRINT_LAYERS],
        env={**env, "CODEBUILD_BUILD_SUCCEEDING": "0"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (failed.returncode, failed.stdout) == (0, "")  # a failed build has nothing to weigh
