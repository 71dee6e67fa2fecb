"""The CI workflows' region step run for real with bash on each stack file (a process); the
rest of the workflow checks are in tests/unit/deploy/test_workflows.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.test_workflows import ROOT, load, steps


def run_region_step(job: dict[str, Any], stack: str, tmp_path: Path) -> str:
    """Runs the job's region step for real on this repository's stack file."""
    (step,) = [s for s in steps(job) if s.get("id") == "region"]
    out = tmp_path / f"github_output_{stack}"
    env = {**os.environ, "STACK": stack, "GITHUB_OUTPUT": str(out)}
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", step["run"]], cwd=ROOT, env=env, check=True, timeout=60
    )
    text = out.read_text()
    out.unlink()
    return text


@pytest.mark.processes
def test_the_region_comes_from_each_stack_file(tmp_path: Path) -> None:
    preview = load("preview.yml")["jobs"]
    deploy = load("deploy.yml")["jobs"]
    for job in (preview["preview-dev"], preview["preview-prod"], deploy["dev"], deploy["prod"]):
        stack = job["env"]["STACK"]
        document = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
        expected = f"region={document['config'].get('aws:region', 'us-east-1')}\n"
        assert run_region_step(job, stack, tmp_path) == expected
