"""worker/entrypoint.sh, the real worker and every cold-start phase (issue 24), as processes.

The stand-ins: `vllm` on PATH records its arguments, leaves a file in VLLM_CACHE_ROOT (what a
compile would) and then runs the local speech server (tone backend) under the served name;
`worker.weights` is a stand-in module that records its arguments and fills the destination
(the real fetch is worker/weights.py's); ECS's metadata endpoint, DescribeTasks and IMDSv2 are
tests/lib/ecs_stand_in.py. The queue, the bucket and the compile-cache archive are on the moto
server. What this cannot show: a real GPU's figures (docs/deploy.md#cold-start-phase-budget).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lib.ecs_stand_in import INSTANCE_TYPE, ecs_stand_in
from tests.lib.procs import env_for, list_keys, make_queues_and_bucket, wait_for
from tests.lib.procs import worker_env as worker_test_env
from tests.lib.stack_support import WORKER_DIR
from tts_fleet.local.procs import free_port
from worker.coldstart import PHASES
from worker.jobs import Job
from worker.metrics import COLD_START_SECONDS

ENTRYPOINT = WORKER_DIR / "entrypoint.sh"
MODEL = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
STACK = "cold-test"

FAKE_VLLM = """#!{python}
import os, sys
args = sys.argv[1:]
with open(os.environ["EVENTS"], "a") as f:
    f.write("vllm " + " ".join(args) + "\\n")
root = os.environ["VLLM_CACHE_ROOT"]
os.makedirs(os.path.join(root, "torch_compile_cache"), exist_ok=True)
with open(os.path.join(root, "torch_compile_cache", "graph.bin"), "w") as f:
    f.write("compiled")
name = args[args.index("--served-model-name") + 1] if "--served-model-name" in args else args[1]
port = args[args.index("--port") + 1]
os.execv(sys.executable, [sys.executable, "-m", "tts_fleet.local.speech_server", "--host",
         "127.0.0.1", "--port", port, "--backend", "tone", "--model", name])
"""

FAKE_WEIGHTS = """import os, sys, time
with open(os.environ["EVENTS"], "a") as f:
    f.write("weights " + " ".join(sys.argv[1:]) + "\\n")
time.sleep(float(os.environ.get("FAKE_FETCH_SECONDS", "0.3")))  # a fetch takes a while
os.makedirs(sys.argv[3], exist_ok=True)
open(os.path.join(sys.argv[3], "config.json"), "w").write("{}")
"""


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    vllm = bin_dir / "vllm"
    vllm.write_text(FAKE_VLLM.format(python=sys.executable))
    vllm.chmod(0o755)
    package = tmp_path / "pkg" / "worker"
    package.mkdir(parents=True)
    # The real worker package, with the stand-in weights fetch found first.
    (package / "__init__.py").write_text(f"__path__.append({str(WORKER_DIR)!r})\n")
    (package / "weights.py").write_text(FAKE_WEIGHTS)
    root = WORKER_DIR.parent
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "PYTHONPATH": f"{tmp_path / 'pkg'}:{root}",
        "EVENTS": str(tmp_path / "events"),
        "COLDSTART_MARKS": str(tmp_path / "marks"),
        "WEIGHTS_DIR": str(tmp_path / "data" / "weights"),
        "GPU_NAME": "NVIDIA L4",
        "TMPDIR": str(tmp_path),
    }


@pytest.fixture
def run_entrypoint(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def run(env: dict[str, str]) -> subprocess.Popen[bytes]:
        out = open(tmp_path / "stdout", "wb")  # noqa: SIM115 - closed with the process
        err = open(tmp_path / "stderr", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            ["bash", str(ENTRYPOINT)],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        started.append(proc)
        return proc

    yield run
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def cold_start_lines(stdout: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stdout.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if COLD_START_SECONDS in line]


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_every_phase_is_emitted_in_order_with_ecs_s_own_figures(
    aws_env: dict[str, str],
    sqs: Any,
    s3: Any,
    sandbox: dict[str, str],
    run_entrypoint: Any,
    tmp_path: Path,
) -> None:
    names = make_queues_and_bucket(sqs, s3)
    sqs.send_message(QueueUrl=names["queue_url"], MessageBody=Job(id="first", text="Hi.").body())
    port = free_port()
    t0 = time.time() - 110  # the task was created 110 s ago; its container started 5.5 s ago
    created, pull_started, pull_stopped, started = t0, t0 + 60, t0 + 102.25, t0 + 104.5
    with ecs_stand_in(created, pull_started, pull_stopped, started) as ecs:
        env = {
            **worker_test_env(aws_env, **env_for(names)),
            **sandbox,
            "SPEECH_MODEL": MODEL,
            "SPEECH_PORT": str(port),
            "SPEECH_URL": f"http://127.0.0.1:{port}",
            "STACK_NAME": STACK,
            "HEALTH_TIMEOUT_SECONDS": "60",
            "WEIGHTS_URI": f"s3://{names['bucket']}/weights/{MODEL}/0c0e3051/",
            "ECS_CONTAINER_METADATA_URI_V4": ecs.metadata_uri,
            "AWS_ENDPOINT_URL_ECS": ecs.url,
            "IMDS_URL": ecs.url,
        }
        proc = run_entrypoint(env)
        stdout = tmp_path / "stdout"
        wait_for(
            lambda: any(line["Phase"] == "total" for line in cold_start_lines(stdout)),
            60,
            0.1,
            "the total cold start line",
        )
        archive = f"cache/{MODEL}/0c0e3051/nvidia-l4/vllm-cache.tar"
        wait_for(lambda: archive in list_keys(s3, names["bucket"], "cache/"), 30, 0.1, "save")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "stderr").read_text()

    lines = cold_start_lines(stdout)
    assert [line["Phase"] for line in lines] == list(PHASES)
    for line in lines:
        assert (line["Stack"], line["InstanceType"]) == (STACK, INSTANCE_TYPE)
        metric = line["_aws"]["CloudWatchMetrics"][0]
        assert metric["Dimensions"] == [["Stack", "Phase", "InstanceType"]]
        assert metric["Metrics"] == [{"Name": COLD_START_SECONDS, "Unit": "Seconds"}]
    seconds = {line["Phase"]: line[COLD_START_SECONDS] for line in lines}
    assert seconds["provision"] == 104.5  # created → container started, as ECS recorded them
    assert seconds["pull"] == 42.25
    assert 0.3 <= seconds["weights"] < 10  # the stand-in fetch sleeps 0.3 s
    assert 110 < seconds["total"] < 170
    assert seconds["first-job"] < seconds["total"] - seconds["provision"]

    marks = [line.split()[0] for line in (tmp_path / "marks").read_text().splitlines()]
    assert marks == [
        "weights-start",
        "weights-end",
        "cache-start",
        "cache-end",
        "server-start",
        "server-healthy",
    ]
    events = (tmp_path / "events").read_text().splitlines()
    assert events[0] == f"weights fetch {env['WEIGHTS_URI']} {sandbox['WEIGHTS_DIR']}"
    assert events[1].startswith(
        f"vllm serve {sandbox['WEIGHTS_DIR']} --served-model-name {MODEL} --omni "
    )
    assert "job first done" in (tmp_path / "stderr").read_text()
    # The compile cache went beside the weights, and from there to cache/ beside weights/.
    assert (tmp_path / "data" / "vllm-cache" / "torch_compile_cache" / "graph.bin").exists()
    assert f"GET {ecs.metadata_uri.removeprefix(ecs.url)}/task" in ecs.requests
    assert "POST AmazonEC2ContainerServiceV20141113.DescribeTasks" in ecs.requests


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_stop_during_the_weights_fetch_ends_it_at_once_and_starts_nothing(
    sandbox: dict[str, str], run_entrypoint: Any, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        **sandbox,
        "SPEECH_MODEL": MODEL,
        "SPEECH_PORT": str(free_port()),
        "WEIGHTS_URI": f"s3://bucket/weights/{MODEL}/0c0e3051/",
        "FAKE_FETCH_SECONDS": "30",
    }
    proc = run_entrypoint(env)
    events = tmp_path / "events"
    wait_for(lambda: events.exists() and events.read_text(), 20, 0.05, "the fetch")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert time.monotonic() - sent < 5  # not the fetch's 30 s
    assert [line.split()[0] for line in events.read_text().splitlines()] == ["weights"]
    assert "stopped during start-up" in (tmp_path / "stderr").read_text()
