"""Helpers for the infrastructure mock tests: run components or __main__, read policies.

What a mock cannot prove: that AWS accepts the request. These tests pin what the program asks
for (counts and inputs per type token); AWS-side validation happens at `pulumi preview`/`up`.
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pulumi

from components.platform import Platform, PlatformArgs
from tests.lib.pulumi_harness import Recorded, RecordingMocks, run_program, stack_config
from tts_fleet.config.models import StackConfig
from tts_fleet.config.stack_file import StackFile

ROOT = Path(__file__).resolve().parents[2]
WORKER_DIR = ROOT / "worker"
PREBUILT = "123456789012.dkr.ecr.us-east-1.amazonaws.com/tts-worker:v1"


def stack_file_config(stack: str) -> dict[str, Any]:
    """The engine's config map for `Pulumi.<stack>.yaml` (all namespaces)."""
    return dict(StackFile.of_stack(stack, ROOT).entries)


def run_platform(raw: dict[str, Any] | None = None, stack: str = "dev") -> RecordingMocks:
    """Platform from a `{section: value}` config, exactly as __main__ would build it."""
    config = StackConfig.from_raw(raw or {})

    def program() -> None:
        Platform("tts", PlatformArgs(config=config, stack=stack, worker_dir=str(WORKER_DIR)))

    return run_program(program, stack_config(raw or {}), stack)


def run_main(config: dict[str, Any], stack: str) -> tuple[RecordingMocks, dict[str, Any]]:
    """Runs __main__.py under the recording mocks; returns the mocks and resolved exports."""
    exports: dict[str, Any] = {}

    def program() -> pulumi.Output[Any]:
        runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")
        root = pulumi.runtime.get_root_resource()
        names = sorted(root.outputs)  # type: ignore[union-attr]
        values = [root.outputs[n] for n in names]  # type: ignore[union-attr]
        return pulumi.Output.all(*values).apply(
            lambda v: exports.update(zip(names, v, strict=True))
        )

    return run_program(program, config, stack), exports


def policy(recorded: Recorded, key: str = "policy") -> dict[str, Any]:
    """A JSON policy input (a string once the engine serialises it) as a dict."""
    value = recorded.inputs[key]
    return json.loads(value) if isinstance(value, str) else value


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def types_of(mocks: RecordingMocks, prefix: str) -> dict[str, int]:
    return {t: n for t, n in mocks.counts().items() if t.startswith(prefix)}
