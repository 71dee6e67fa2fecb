"""A real worker process (python -m worker) keeps its task protected while busy; the
protection client in process is in tests/integration/worker/test_protection.py."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from tests.integration.worker import test_protection as in_process
from tests.integration.worker.test_protection import STATE, Agent
from tests.lib.procs import (
    Processes,
    env_for,
    make_queues_and_bucket,
    start_speech_server,
    start_worker,
    wait_for,
)
from worker.jobs import Job

# The stand-in ECS agent of the in-process tests, a fixture found by pytest under this name.
agent = in_process.agent


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_worker_protected_while_busy(aws_env, sqs, s3, agent: Agent, procs: Processes) -> None:
    names = make_queues_and_bucket(sqs, s3, max_receive_count=5, visibility_timeout=30)
    with start_speech_server("tone", latency_ms=3_000, batch_exponent=0) as speech:
        worker = procs.add(
            start_worker(
                aws_env,
                SPEECH_URL=speech.url,
                ECS_AGENT_URI=agent.uri,
                PROTECTION_EXPIRES_MINUTES=5,
                PROTECTION_RENEW_SECONDS=1,
                **env_for(names),
            )
        )
        for i in range(2):
            sqs.send_message(
                QueueUrl=names["queue_url"], MessageBody=Job(id=f"p{i}", text="Hi.").body()
            )
        wait_for(lambda: agent.puts() and agent.puts()[-1] == {"ProtectionEnabled": False}, 60)
        worker.terminate()
        assert worker.wait(30) == 0
    finished = [
        datetime.fromisoformat(
            json.loads(
                s3.get_object(Bucket=names["bucket"], Key=f"outputs/p{i}.json")["Body"].read()
            )["finished_at"]
        ).timestamp()
        for i in range(2)
    ]
    puts = [(at, body) for at, method, _, body in agent.calls if method == "PUT"]
    on = [at for at, body in puts if body["ProtectionEnabled"]]
    off = [at for at, body in puts if not body["ProtectionEnabled"]]
    assert all(body.get("ExpiresInMinutes") == 5 for _, body in puts if body["ProtectionEnabled"])
    assert on[0] < min(finished)  # on before any job finished
    assert len(on) >= 2  # renewed during the 3 s jobs
    assert off == [puts[-1][0]] and off[0] > max(finished)  # off once, when idle
    assert {path for _, _, path, _ in agent.calls} == {STATE}
