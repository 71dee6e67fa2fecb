"""`tts-fleet deploy` driving the real Pulumi CLI against a `file://` backend in a temp dir.

Needs the `pulumi` CLI on PATH; this project's CI machines cannot install it, so there the
test is skipped with that reason (the only skip the deploy issue allows). The program makes
no cloud resources: it reads the stack config through tts_fleet/config/models.py and exports it,
which proves the `--set` path semantics and value typing end to end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.skipif(shutil.which("pulumi") is None, reason="pulumi CLI not on PATH")

ENTRY = "from tts_fleet.cli.main import main; main()"
PROGRAM = """import pulumi

from tts_fleet.config.models import StackConfig
from components.stack_config import load_stack_config

config = load_stack_config()
pulumi.export("maxWorkers", config.scaling.max_workers)
pulumi.export("idleMinutes", config.scaling.idle_minutes)
"""


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        "name: tts-fleet\nruntime:\n  name: python\n  options:\n"
        f"    toolchain: pip\n    virtualenv: {sys.prefix}\n"
    )
    (project / "Pulumi.dev.yaml").write_text("config:\n  tts-fleet:scaling:\n    maxWorkers: 4\n")
    (project / "__main__.py").write_text(PROGRAM)
    (tmp_path / "state").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI")}
    env.update(
        PULUMI_BACKEND_URL=f"file://{tmp_path / 'state'}",
        PULUMI_CONFIG_PASSPHRASE="integration-test",
        PULUMI_SKIP_UPDATE_CHECK="true",
    )
    return project, env


def deploy(workspace: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess:
    project, env = workspace
    argv = [sys.executable, "-c", ENTRY, "deploy", *args, "--project-dir", str(project)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=500)


@pytest.mark.processes
@pytest.mark.timeout(600)
def test_preview_up_outputs_destroy(workspace: tuple[Path, dict[str, str]]) -> None:
    preview = deploy(workspace, "preview", "--stack", "dev", "--json")
    assert preview.returncode == 0, preview.stderr
    first = json.loads(preview.stdout)
    assert first["ok"] is True and first["changes"]["create"] >= 1  # at least the Stack itself

    up = deploy(
        workspace, "up", "--stack", "dev", "--yes", "--json", "--set", "scaling.maxWorkers=12"
    )
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["outputs"] == {"maxWorkers": 12, "idleMinutes": 5}
    # `config set --path` wrote a number into the stack file, not the string "12".
    stack_file = yaml.safe_load((workspace[0] / "Pulumi.dev.yaml").read_text())
    assert stack_file["config"]["tts-fleet:scaling"]["maxWorkers"] == 12

    again = deploy(workspace, "preview", "--stack", "dev", "--expect-no-changes")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("preview dev: 0 create, 0 update, 0 delete")

    outputs = deploy(workspace, "outputs", "--stack", "dev", "--json")
    assert json.loads(outputs.stdout)["outputs"]["maxWorkers"] == 12

    destroyed = deploy(workspace, "destroy", "--stack", "dev", "--yes")
    assert destroyed.returncode == 0, destroyed.stderr
