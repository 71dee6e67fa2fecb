"""Stack config: every rule of issue 2 with its exact message, the repo's stack files, and what
a user sees when a stack file is wrong (one readable line, no traceback, no resource)."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pulumi
import pytest

from tests.lib.pulumi_harness import run_program
from tests.lib.stack_support import ROOT
from tts_fleet.config.models import ConfigError, StackConfig
from tts_fleet.config.stack_file import StackFile

SECTIONS = "scaling, network, gpu, queue, worker, outputs, alerts, producers, notifications"
SCALING_KEYS = (
    "minWorkers, maxWorkers, jobsPerWorker, idleMinutes, hostIdleSeconds, schedules,"
    " mode, coldStartWork, deadlineMinutes"
)
EXISTING = {"mode": "existing", "vpcId": "vpc-0abc12345"}
TWO_SUBNETS = ["subnet-0abc12345", "subnet-0def67890"]

# (raw config, exact problem lines) — one row per rule in the issue, plus its neighbours.
RULES: list[tuple[dict[str, Any], list[str]]] = [
    (
        {"scaling": {"minWorkers": 5, "maxWorkers": 2}},
        ["tts-fleet:scaling.maxWorkers: must be >= minWorkers (2 < 5)"],
    ),
    ({"scaling": {"maxWorkers": 0}}, ["tts-fleet:scaling.maxWorkers: must be >= 1 (got 0)"]),
    ({"scaling": {"idleMinutes": 0}}, ["tts-fleet:scaling.idleMinutes: must be >= 1 (got 0)"]),
    (
        {"scaling": {"idleMinutes": 1441}},
        ["tts-fleet:scaling.idleMinutes: must be <= 1440 (got 1441)"],
    ),
    (
        {"scaling": {"jobsPerWorker": 0}},
        ["tts-fleet:scaling.jobsPerWorker: must be >= 1 (got 0)"],
    ),
    (
        {"network": {"mode": "existing", "subnetIds": TWO_SUBNETS}},
        ["tts-fleet:network.vpcId: existing mode needs a VPC id like 'vpc-0abc12345'"],
    ),
    (
        {"network": {**EXISTING, "subnetIds": TWO_SUBNETS[:1]}},
        [
            "tts-fleet:network.subnetIds: existing mode needs at least 2 private subnet ids "
            "in different AZs (got 1)"
        ],
    ),
    (
        {"queue": {"visibilityTimeoutSeconds": 29}},
        ["tts-fleet:queue.visibilityTimeoutSeconds: must be >= 30 (got 29)"],
    ),
    (
        {"queue": {"visibilityTimeoutSeconds": 43201}},
        ["tts-fleet:queue.visibilityTimeoutSeconds: must be <= 43200 (got 43201)"],
    ),
    ({"queue": {"maxReceiveCount": 0}}, ["tts-fleet:queue.maxReceiveCount: must be >= 1 (got 0)"]),
    (
        {"queue": {"maxReceiveCount": 1001}},
        ["tts-fleet:queue.maxReceiveCount: must be <= 1000 (got 1001)"],
    ),
    ({"gpu": {"gpuCount": 0}}, ["tts-fleet:gpu.gpuCount: must be >= 1 (got 0)"]),
    ({"gpu": {"minGpuMemoryGib": 0}}, ["tts-fleet:gpu.minGpuMemoryGib: must be >= 1 (got 0)"]),
    ({"gpu": {"vcpu": {"min": 8, "max": 4}}}, ["tts-fleet:gpu.vcpu.max: must be >= min (4 < 8)"]),
    ({"gpu": {"vcpu": {"min": 0, "max": 4}}}, ["tts-fleet:gpu.vcpu.min: must be >= 1 (got 0)"]),
    (
        {"gpu": {"memoryGib": {"min": 64, "max": 32}}},
        ["tts-fleet:gpu.memoryGib.max: must be >= min (32 < 64)"],
    ),
    (
        {"gpu": {"capacityType": "reserved"}},
        ["tts-fleet:gpu.capacityType: must be one of 'on-demand' or 'spot' (got 'reserved')"],
    ),
    (
        {"network": {"mode": "vpn"}},
        ["tts-fleet:network.mode: must be one of 'nat', 'endpoints' or 'existing' (got 'vpn')"],
    ),
    (
        {"outputs": {"breakGlassPrincipalArns": ["arn:aws:iam::123456789012:role/ok", "admin"]}},
        [
            "tts-fleet:outputs.breakGlassPrincipalArns[1]: 'admin' is not an IAM account, user"
            " or role ARN"
        ],
    ),
]

# The edges of every range above are accepted.
VALID: list[dict[str, Any]] = [
    {"scaling": {"minWorkers": 3, "maxWorkers": 3}},
    {"scaling": {"maxWorkers": 1, "idleMinutes": 1, "jobsPerWorker": 1}},
    {"scaling": {"idleMinutes": 1440}},
    {"queue": {"visibilityTimeoutSeconds": 30, "maxReceiveCount": 1}},
    {"queue": {"visibilityTimeoutSeconds": 43200, "maxReceiveCount": 1000}},
    {"network": {**EXISTING, "subnetIds": TWO_SUBNETS}},
    {"outputs": {"breakGlassPrincipalArns": ["arn:aws:iam::123456789012:role/ops/break-glass"]}},
    {"gpu": {"vcpu": {"min": 8, "max": 8}, "memoryGib": {"min": 32, "max": 32}, "gpuCount": 1}},
]


@pytest.mark.parametrize(("raw", "lines"), RULES, ids=[str(r) for r, _ in RULES])
def test_each_rule_reports_its_exact_line(raw: dict[str, Any], lines: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        StackConfig.from_raw(raw)
    assert caught.value.problems == lines


@pytest.mark.parametrize("raw", VALID, ids=[str(r) for r in VALID])
def test_range_edges_are_accepted(raw: dict[str, Any]) -> None:
    StackConfig.from_raw(raw)


def test_unknown_keys_fail_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as caught:
        StackConfig.from_raw({"scalng": {}, "scaling": {"maxWorker": 3}})
    assert caught.value.problems == [
        f"tts-fleet:scalng: unknown key (known: {SECTIONS}); did you mean 'scaling'?",
        f"tts-fleet:scaling.maxWorker: unknown key (known: {SCALING_KEYS}); "
        "did you mean 'maxWorkers'?",
    ]


@pytest.mark.parametrize("old", ["lambda", "alarms"])
def test_the_old_mode_key_says_what_it_is_called_now(old: str) -> None:
    with pytest.raises(ConfigError) as caught:
        StackConfig.from_raw({"scaling": {"controller": old}})
    assert caught.value.problems == [
        "tts-fleet:scaling.controller: renamed: it is now scaling.mode"
        " (`lambda` is now `controller`, `alarms` stays)"
    ]


def test_shared_memory_that_leaves_the_task_too_little_host_memory_is_refused() -> None:
    """A cross-section rule: deploy, preflight and `local --stack` reject what `up` would."""
    with pytest.raises(ConfigError) as caught:
        StackConfig.from_raw({"worker": {"sharedMemoryMib": 11_500}})
    assert caught.value.problems == [
        "tts-fleet:worker.sharedMemoryMib: 11500 leaves 788 MiB of the 16 GiB host"
        " (gpu.memoryGib.min) for the task (at least 1024); lower it or raise gpu.memoryGib.min"
    ]
    # The floor itself is enough, and a bigger host makes room.
    StackConfig.from_raw({"worker": {"sharedMemoryMib": 11_264}})
    StackConfig.from_raw(
        {"worker": {"sharedMemoryMib": 11_500}, "gpu": {"memoryGib": {"min": 32, "max": 512}}}
    )


def test_the_mode_defaults_to_the_controller() -> None:
    assert StackConfig().scaling.mode == "controller"
    assert StackConfig.from_raw({"scaling": {"mode": "alarms"}}).scaling.mode == "alarms"


def test_several_bad_keys_give_several_lines() -> None:
    with pytest.raises(ConfigError) as caught:
        StackConfig.from_raw(
            {
                "scaling": {"maxWorkers": 0, "idleMinutes": 0},
                "queue": {"maxReceiveCount": 0},
                "network": {"mode": "existing"},
            }
        )
    assert caught.value.problems == [
        "tts-fleet:scaling.maxWorkers: must be >= 1 (got 0)",
        "tts-fleet:scaling.idleMinutes: must be >= 1 (got 0)",
        "tts-fleet:queue.maxReceiveCount: must be >= 1 (got 0)",
        "tts-fleet:network.vpcId: existing mode needs a VPC id like 'vpc-0abc12345'",
        "tts-fleet:network.subnetIds: existing mode needs at least 2 private subnet ids "
        "in different AZs (got 0)",
    ]


def test_every_stack_file_in_the_repo_validates() -> None:
    files = sorted(ROOT.glob("Pulumi.*.yaml"))
    assert [f.name for f in files] == ["Pulumi.dev.yaml", "Pulumi.prod.yaml"]
    dev, prod = (StackFile.load(f).config() for f in files)
    # The files' own values arrive (not just defaults).
    assert (dev.gpu.capacity_type, dev.outputs.expire_days) == ("spot", 7)
    assert (prod.scaling.max_workers, prod.network.nat_gateways) == (40, "one-per-az")


def test_an_empty_stack_file_is_a_working_dev_stack(tmp_path: Path) -> None:
    empty = tmp_path / "Pulumi.empty.yaml"
    empty.write_text("config: {}\n")
    assert StackFile.load(empty).config() == StackConfig()


@pytest.mark.parametrize(
    ("section", "line"),
    [
        (
            "  tts-fleet:scaling:\n    maxWorker: 8\n",
            f"tts-fleet:scaling.maxWorker: unknown key (known: {SCALING_KEYS}); "
            "did you mean 'maxWorkers'?",
        ),
        (
            "  tts-fleet:scaling:\n    maxWorkers: 0\n",
            "tts-fleet:scaling.maxWorkers: must be >= 1 (got 0)",
        ),
    ],
    ids=["misspelled-key", "max-workers-0"],
)
def test_a_bad_stack_file_gives_one_readable_line(tmp_path: Path, section: str, line: str) -> None:
    path = tmp_path / "Pulumi.typo.yaml"
    path.write_text("config:\n  aws:region: us-east-1\n" + section)
    with pytest.raises(ConfigError) as caught:
        StackFile.load(path).config()
    assert caught.value.problems == [line]


def test_pulumi_up_with_a_bad_key_stops_before_any_resource_with_one_line() -> None:
    """What `pulumi up` shows: a RunError (printed without a traceback) naming the key."""
    seen: list[str] = []

    def program() -> None:
        try:
            runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")
        except pulumi.RunError as error:
            seen.append(str(error))

    mocks = run_program(program, {"tts-fleet:scaling": {"maxWorkers": 0}}, "typo")
    assert seen == [
        "invalid stack config for 'typo':\ntts-fleet:scaling.maxWorkers: must be >= 1 (got 0)"
    ]
    assert mocks.resources == []


@pytest.mark.parametrize(
    ("worker", "line"),
    [
        (
            {"modelRevision": "main"},
            "tts-fleet:worker.modelRevision: must be a commit SHA, 40 hex digits (got 'main')",
        ),
        (
            {"model": "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign", "taskType": "VoiceDesign"},
            "tts-fleet:worker.modelRevision: is the default model's commit: set the commit of "
            "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign",
        ),
    ],
)
def test_the_model_revision_is_a_commit_of_the_configured_model(
    worker: dict[str, str], line: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        StackConfig.from_raw({"worker": worker})
    assert raised.value.problems == [line]
    other = {
        "model": "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign",
        "taskType": "VoiceDesign",
        "modelRevision": "5" * 40,
    }
    assert StackConfig.from_raw({"worker": other}).worker.model_revision == "5" * 40
    prebuilt = {
        "model": "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign",
        "taskType": "VoiceDesign",
        "image": "repo/tts:v1",
    }
    assert StackConfig.from_raw({"worker": prebuilt}).worker.image == "repo/tts:v1"


@pytest.mark.parametrize(
    ("worker", "expected"),
    [
        (
            {"qa": {"mode": "asr"}},
            [
                "tts-fleet:worker.qa.asrModelRevision: mode asr bakes the recognizer into the"
                " image the stack builds: set the commit SHA (40 hex digits) of"
                " openai/whisper-large-v3-turbo"
            ],
        ),
        (
            {"qa": {"asrModelRevision": "main"}},
            [
                "tts-fleet:worker.qa.asrModelRevision: must be a commit SHA, 40 hex digits"
                " (got 'main')"
            ],
        ),
        ({"qa": {"mode": "asr"}, "image": "123.dkr.ecr.us-east-1.amazonaws.com/w:1"}, []),
        ({"qa": {"mode": "asr", "asrModelRevision": "ab" * 20}}, []),
    ],
    ids=["asr-needs-revision", "revision-is-a-commit", "prebuilt-brings-its-own", "pinned"],
)
def test_the_recognizer_baked_into_the_image_is_pinned_by_commit(
    worker: dict[str, object], expected: list[str]
) -> None:
    try:
        StackConfig.from_raw({"worker": worker})
        problems: list[str] = []
    except ConfigError as error:
        problems = error.problems
    assert problems == expected


@pytest.mark.parametrize(
    ("worker", "line"),
    [
        (
            {"taskType": "Base"},
            "tts-fleet:worker.model: 'Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice' is a CustomVoice"
            " checkpoint, not one for taskType Base (e.g. Qwen/Qwen3-TTS-12Hz-1.7B-Base)",
        ),
        (
            {"model": "Qwen/Qwen3-TTS-12Hz-1.7B-Base", "modelRevision": "5" * 40},
            "tts-fleet:worker.model: 'Qwen/Qwen3-TTS-12Hz-1.7B-Base' is a Base checkpoint, not"
            " one for taskType CustomVoice (e.g. Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice)",
        ),
        (
            {"taskType": "VoiceDesign", "model": "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign"},
            "tts-fleet:worker.modelRevision: is the default model's commit: set the commit of "
            "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign",
        ),
    ],
)
def test_the_task_type_needs_its_own_checkpoint_and_revision(
    worker: dict[str, str], line: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        StackConfig.from_raw({"worker": worker})
    assert raised.value.problems == [line]
    base = {"taskType": "Base", "model": "Qwen/Qwen3-TTS-12Hz-1.7B-Base", "modelRevision": "6" * 40}
    assert StackConfig.from_raw({"worker": base}).worker.task_type == "Base"
    # A model whose name says no task type is taken at its word (the canary checks it).
    unnamed = {"taskType": "Base", "model": "org/my-tts", "modelRevision": "6" * 40}
    assert StackConfig.from_raw({"worker": unnamed}).worker.task_type == "Base"
