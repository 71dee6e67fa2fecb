"""`worker.taskType` under the Pulumi mocks: exactly what a Base or VoiceDesign stack adds.

The same stack is built with each task type and every recorded resource compared: another task
type changes the task's SPEECH_TASK_TYPE and gives the task role read access to `voices/*`
(the library its jobs name), nothing else. What a mock cannot prove: that vLLM-Omni serves
that checkpoint (the worker's start-up canary checks it).
"""

from __future__ import annotations

import pytest

from tests.lib.pulumi_harness import RecordingMocks
from tests.lib.stack_support import PREBUILT, run_platform
from tests.unit.components.test_weights import (
    ROLE_POLICY,
    TASK,
    changed,
    container,
    task_statements,
)

UNNAMED_MODEL = "org/tts"  # a name that says no task type, so every taskType goes with it


def build(task_type: str) -> RecordingMocks:
    worker = {"image": PREBUILT, "model": UNNAMED_MODEL, "taskType": task_type}
    return run_platform({"worker": worker})


@pytest.fixture(scope="module")
def custom() -> RecordingMocks:
    return build("CustomVoice")


@pytest.mark.parametrize("task_type", ["Base", "VoiceDesign"])
def test_a_library_task_type_reads_voices_and_says_its_task(
    custom: RecordingMocks, task_type: str
) -> None:
    other = build(task_type)
    assert {kind for kind, _ in changed(custom, other)} == {TASK, ROLE_POLICY}
    bucket_arn = f"arn:aws:s3:::{other.one('aws:s3/bucket:Bucket').name}"
    before, after = task_statements(custom), task_statements(other)
    assert after[: len(before)] == before
    assert after[len(before) :] == [
        {
            "Sid": "ReadVoices",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": f"{bucket_arn}/voices/*",
        }
    ]
    env_before = {e["name"]: e["value"] for e in container(custom)["environment"]}
    env_after = {e["name"]: e["value"] for e in container(other)["environment"]}
    assert env_before["SPEECH_TASK_TYPE"] == "CustomVoice"
    assert env_after == {**env_before, "SPEECH_TASK_TYPE": task_type}
