"""`tts-fleet deploy` through click with a recording stack factory.

The factory records what the driver opened and asked of Pulumi; the parsing, validation,
guards and summaries run for real. What this cannot prove is that the Pulumi CLI accepts
the calls: test_integration.py does that where the CLI is installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from pulumi.automation import ConfigValue, OutputValue
from pulumi.automation.errors import CommandError

from tests.lib.deploy_fakes import RecordingFactory
from tts_fleet.cli.deploy import DeployHooks, deploy
from tts_fleet.config.models import StackConfig
from tts_fleet.deploy.driver import MISSING_CLI, DeployError, PreflightNote, PreflightRun
from tts_fleet.exit_codes import ExitCode


@click.group()
def cli() -> None:
    """Only the deploy area, so another area's import error cannot mask these results
    (test_missing_cli.py runs the full `tts-fleet` entry point)."""


cli.add_command(deploy)


def invoke(
    factory: RecordingFactory, project: Path, *args: str, preflight: PreflightRun | None = None
) -> Result:
    """The deploy command; no preview preflight unless one is given (its own tests below)."""
    argv = ["deploy", *args, "--project-dir", str(project)]
    return CliRunner().invoke(cli, argv, obj=DeployHooks(factory=factory, preflight=preflight))


def test_bad_set_is_rejected_before_the_workspace_is_touched(project: Path) -> None:
    factory = RecordingFactory()
    result = invoke(factory, project, "preview", "--stack", "dev", "--set", "scaling.maxWorkers=0")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "Error: tts-fleet:scaling.maxWorkers: must be >= 1 (got 0)"
    ]
    assert result.stdout == ""
    assert factory.opened == []


def test_set_merges_with_the_stack_file_before_validation(project: Path) -> None:
    # The stack file has minWorkers 0; prod has 1, so maxWorkers=0 there breaks two rules.
    factory = RecordingFactory()
    result = invoke(factory, project, "up", "--stack", "dev", "--set", "scaling.minWorkers=5")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "Error: tts-fleet:scaling.maxWorkers: must be >= minWorkers (4 < 5)"
    ]
    assert factory.opened == []


@pytest.mark.parametrize(
    ("arg", "line"),
    [
        ("scaling.maxWorker=3", "tts-fleet:scaling.maxWorker: unknown key"),
        ("scaling", "--set 'scaling': expected key=value, e.g. scaling.maxWorkers=12"),
        ("network.mode=vpn", "tts-fleet:network.mode: must be one of 'nat', 'endpoints' or"),
    ],
)
def test_each_bad_set_names_the_key(project: Path, arg: str, line: str) -> None:
    factory = RecordingFactory()
    result = invoke(factory, project, "preview", "--stack", "dev", "--set", arg)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {line}")
    assert factory.opened == []


def test_set_becomes_a_path_style_config_set(project: Path) -> None:
    factory = RecordingFactory()
    result = invoke(
        factory, project, "preview", "--stack", "dev",
        "--set", "scaling.maxWorkers=12", "--set", "aws:region=eu-west-1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert factory.opened == [("dev", project, True)]
    name, args, kwargs = factory.stack.calls[0]
    assert name == "set_all_config" and kwargs == {"path": True}
    config = args[0]
    assert set(config) == {"tts-fleet:scaling.maxWorkers", "aws:region"}
    assert isinstance(config["tts-fleet:scaling.maxWorkers"], ConfigValue)
    # `pulumi config set --path` stores "12" as the number 12 (integers and bools are inferred).
    assert config["tts-fleet:scaling.maxWorkers"].value == "12"
    assert config["tts-fleet:scaling.maxWorkers"].secret is False
    assert config["aws:region"].value == "eu-west-1"
    assert factory.stack.names() == ["set_all_config", "preview"]


def test_no_set_means_no_config_call(project: Path) -> None:
    factory = RecordingFactory()
    assert invoke(factory, project, "preview", "--stack", "dev").exit_code == 0
    assert factory.stack.names() == ["preview"]


def test_preview_prints_the_change_summary_and_streams_pulumi_output(project: Path) -> None:
    factory = RecordingFactory()
    factory.stack.changes = {"create": 3, "update": 1, "same": 10, "replace": 2}
    result = invoke(factory, project, "preview", "--stack", "dev")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "preview dev: 3 create, 1 update, 0 delete, 10 same, 2 replace"
    ]
    assert "preview line from pulumi" in result.stderr.splitlines()
    _, _, kwargs = factory.stack.calls[0]
    assert callable(kwargs["on_output"]) and callable(kwargs["on_error"])


def test_preview_json(project: Path) -> None:
    factory = RecordingFactory()
    factory.stack.changes = {"create": 3}
    result = invoke(factory, project, "preview", "--stack", "dev", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "action": "preview",
        "stack": "dev",
        "ok": True,
        "changes": {"create": 3, "update": 0, "delete": 0, "same": 0},
        "pending": 3,
    }


def test_expect_no_changes_fails_on_drift(project: Path) -> None:
    factory = RecordingFactory()
    factory.stack.changes = {"update": 1, "same": 7}
    result = invoke(factory, project, "preview", "--stack", "dev", "--expect-no-changes")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == ["preview dev: 0 create, 1 update, 0 delete, 7 same"]
    assert result.stderr.splitlines()[-1] == "Error: drift: 1 pending change(s) in stack 'dev'"


def test_expect_no_changes_passes_when_everything_is_the_same(project: Path) -> None:
    factory = RecordingFactory()
    factory.stack.changes = {"same": 7}
    result = invoke(factory, project, "preview", "--stack", "dev", "--expect-no-changes")
    assert result.exit_code == 0


@pytest.mark.parametrize("stack", ["prod", "prod-eu", "acme/tts-fleet/production"])
def test_up_refuses_a_prod_stack_without_yes(project: Path, stack: str) -> None:
    (project / f"Pulumi.{stack.rsplit('/', 1)[-1]}.yaml").write_text("config: {}\n")
    factory = RecordingFactory()
    result = invoke(factory, project, "up", "--stack", stack)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"Error: refusing to run up on protected stack {stack!r} without --yes"
    ]
    assert factory.opened == []


def test_up_runs_on_prod_with_yes_and_prints_outputs(project: Path) -> None:
    factory = RecordingFactory()
    factory.stack.outputs_ = {
        "queueUrl": OutputValue("https://sqs.example/q", secret=False),
        "token": OutputValue("hunter2", secret=True),
    }
    factory.stack.changes = {"create": 42}
    result = invoke(factory, project, "up", "--stack", "prod", "--yes")
    assert result.exit_code == 0, result.output
    assert factory.opened == [("prod", project, True)]
    assert factory.stack.names() == ["up"]
    assert result.stdout.splitlines() == [
        "up prod: 42 create, 0 update, 0 delete, 0 same",
        "outputs:",
        "  queueUrl: https://sqs.example/q",
        "  token: [secret]",
    ]


def test_up_on_dev_needs_no_yes(project: Path) -> None:
    factory = RecordingFactory()
    assert invoke(factory, project, "up", "--stack", "dev").exit_code == 0
    assert factory.stack.names() == ["up"]


def test_destroy_needs_yes_and_selects_an_existing_stack(project: Path) -> None:
    factory = RecordingFactory()
    refused = invoke(factory, project, "destroy", "--stack", "dev")
    assert refused.exit_code == 2
    assert factory.opened == []
    done = invoke(factory, project, "destroy", "--stack", "dev", "--yes")
    assert done.exit_code == 0
    assert factory.opened == [("dev", project, False)]
    assert factory.stack.names() == ["destroy"]


def test_refresh_and_outputs(project: Path) -> None:
    factory = RecordingFactory()
    factory.stack.outputs_ = {"bucket": OutputValue("tts-out", secret=False)}
    refreshed = invoke(factory, project, "refresh", "--stack", "dev")
    assert refreshed.exit_code == 0
    assert refreshed.stdout.startswith("refresh dev: 3 create")
    shown = invoke(factory, project, "outputs", "--stack", "dev", "--json")
    assert json.loads(shown.stdout)["outputs"] == {"bucket": "tts-out"}
    assert factory.stack.names() == ["refresh", "outputs"]
    assert [create for _, _, create in factory.opened] == [False, False]


def test_a_pulumi_failure_is_one_line_and_exit_1(project: Path) -> None:
    from pulumi.automation._cmd import CommandResult

    factory = RecordingFactory()
    factory.stack.error = CommandError(
        CommandResult(stdout="Previewing update (dev)", stderr="error: no credentials", code=255)
    )
    result = invoke(factory, project, "preview", "--stack", "dev")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "Error: pulumi preview failed for stack 'dev': error: no credentials"
    ]


def test_a_missing_cli_from_the_factory_is_exit_3_for_every_action(project: Path) -> None:
    def no_cli(stack: str, project_dir: Path, create: bool) -> None:
        raise DeployError(ExitCode.MISSING_TOOL, MISSING_CLI)

    for args in (["preview"], ["up"], ["destroy", "--yes"], ["refresh"], ["outputs"]):
        result = CliRunner().invoke(
            cli,
            ["deploy", *args, "--stack", "dev", "--project-dir", str(project)],
            obj=DeployHooks(factory=no_cli),  # type: ignore[arg-type]
        )
        assert result.exit_code == 3, args
        assert result.stderr.splitlines() == [f"Error: {MISSING_CLI}"]


def test_a_directory_without_a_project_is_bad_input(tmp_path: Path) -> None:
    factory = RecordingFactory()
    result = invoke(factory, tmp_path, "preview", "--stack", "dev")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"Error: no Pulumi.yaml in {str(tmp_path)!r}; pass --project-dir"
    ]
    assert factory.opened == []


# ---- the GPU preflight before a preview -----------------------------------------------------


class CannedPreflight:
    """Records what the preview asked the preflight for and answers a fixed note."""

    def __init__(self, note: PreflightNote) -> None:
        self.note = note
        self.calls: list[tuple[StackConfig, str, str | None]] = []

    def __call__(self, cfg: StackConfig, stack: str, region: str | None) -> PreflightNote:
        self.calls.append((cfg, stack, region))
        return self.note


NOTE = PreflightNote(
    ("preflight dev: us-east-1, on-demand, zones us-east-1a", "reachable workers: 8"),
    {"reachable_workers": 8},
)


def test_preview_prints_the_preflight_before_the_change_summary(project: Path) -> None:
    factory, preflight = RecordingFactory(), CannedPreflight(NOTE)
    factory.stack.changes = {"create": 3}
    result = invoke(
        factory, project, "preview", "--stack", "dev", "--set", "scaling.maxWorkers=6",
        preflight=preflight,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "preflight dev: us-east-1, on-demand, zones us-east-1a",
        "reachable workers: 8",
        "preview dev: 3 create, 0 update, 0 delete, 0 same",
    ]
    [(cfg, stack, region)] = preflight.calls
    # The merged config (the --set value included) and the stack file's region.
    assert (cfg.scaling.max_workers, stack, region) == (6, "dev", "us-east-1")


def test_preview_json_carries_the_preflight(project: Path) -> None:
    factory = RecordingFactory()
    result = invoke(
        factory, project, "preview", "--stack", "dev", "--json",
        preflight=CannedPreflight(NOTE),
    )  # fmt: skip
    assert json.loads(result.stdout)["preflight"] == {"reachable_workers": 8}


def test_a_set_region_is_the_preflights_region(project: Path) -> None:
    preflight = CannedPreflight(NOTE)
    invoke(
        RecordingFactory(), project, "preview", "--stack", "prod", "--set", "aws:region=eu-west-1",
        preflight=preflight,
    )  # fmt: skip
    assert [call[1:] for call in preflight.calls] == [("prod", "eu-west-1")]


def test_only_preview_runs_the_preflight(project: Path) -> None:
    preflight = CannedPreflight(NOTE)
    for args in (["up"], ["destroy", "--yes"], ["refresh"], ["outputs"]):
        invoke(RecordingFactory(), project, *args, "--stack", "dev", preflight=preflight)
    assert preflight.calls == []


def test_a_preflight_without_credentials_is_a_warning_and_the_preview_still_runs(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for key in (
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(key, raising=False)
    factory = RecordingFactory()
    factory.stack.changes = {"create": 1}
    argv = ["deploy", "preview", "--stack", "dev", "--project-dir", str(project)]
    result = CliRunner().invoke(cli, argv, obj=DeployHooks(factory=factory))  # the real one
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "warning: preflight did not run: no AWS credentials: set AWS_PROFILE or "
        "AWS_ACCESS_KEY_ID, or log in",
        "preview dev: 1 create, 0 update, 0 delete, 0 same",
    ]
    assert factory.stack.names() == ["preview"]
