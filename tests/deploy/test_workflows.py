"""The CI workflows, parsed: triggers, permissions, jobs, and the commands they run.

This checks what the YAML asks GitHub for; it cannot prove GitHub runs it (that needs a
push to a repository with the secrets described in docs/ci.md).
"""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
ROLE = "${{ secrets.AWS_ROLE_ARN }}"


def load(name: str) -> dict[str, Any]:
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the bare key `on` as the boolean True.
    document["on"] = document.pop(True, document.get("on"))
    return document


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job["steps"]


def fill(text: str, job: dict[str, Any], matrix: dict[str, str] | None = None) -> str:
    """`text` with `${{ matrix.x }}` and then the job's `$STACK` filled in."""
    for key, value in (matrix or {}).items():
        text = text.replace(f"${{{{ matrix.{key} }}}}", value)
    stack = fill(job["env"]["STACK"], {}, matrix) if "STACK" in job.get("env", {}) else None
    return text.replace('"$STACK"', stack) if stack else text


def runs(job: dict[str, Any], matrix: dict[str, str] | None = None) -> list[str]:
    """Every shell line the job runs, with the matrix and `$STACK` filled in."""
    lines = [
        fill(line, job, matrix).strip()
        for s in steps(job)
        for line in str(s.get("run", "")).splitlines()
    ]
    return [line for line in lines if line]


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


def uses(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in steps(job) if str(s.get("uses", "")).split("@")[0] == action]


def index_of(job: dict[str, Any], predicate: Any) -> int:
    return next(i for i, s in enumerate(steps(job)) if predicate(s))


def assert_oidc(job: dict[str, Any]) -> None:
    assert job["permissions"]["id-token"] == "write"
    (creds,) = uses(job, "aws-actions/configure-aws-credentials")
    assert creds["with"]["role-to-assume"] == ROLE
    assert creds["with"]["aws-region"] == "${{ steps.region.outputs.region }}"
    assert index_of(job, lambda s: s.get("id") == "region") < steps(job).index(creds)
    assert not {"aws-access-key-id", "aws-secret-access-key"} & set(creds["with"])
    assert len(uses(job, "pulumi/actions")) == 1  # installs the CLI (no command given)
    assert "command" not in (uses(job, "pulumi/actions")[0].get("with") or {})
    # credentials and the CLI come before the first deploy command
    first_deploy = index_of(job, lambda s: "tts-fleet deploy" in str(s.get("run", "")))
    assert index_of(job, lambda s: "configure-aws-credentials" in str(s.get("uses"))) < first_deploy
    assert index_of(job, lambda s: "pulumi/actions" in str(s.get("uses"))) < first_deploy


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_no_long_lived_keys_anywhere(name: str) -> None:
    text = (WORKFLOWS / name).read_text()
    for secret in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "aws-access-key-id"):
        assert secret not in text
    assert load(name)["permissions"] == {"contents": "read"}  # jobs widen only what they need


def test_preview_runs_on_pull_requests_tests_then_previews_dev_and_prod() -> None:
    workflow = load("preview.yml")
    assert set(workflow["on"]) == {"pull_request"}
    test_job, preview = workflow["jobs"]["test"], workflow["jobs"]["preview"]
    assert "make test" in runs(test_job)
    assert uses(test_job, "actions/setup-python")[0]["with"]["python-version"] == "3.11"
    assert preview["needs"] == "test"
    assert preview["permissions"] == {
        "contents": "read",
        "id-token": "write",
        "pull-requests": "write",
    }
    assert_oidc(preview)
    matrix = preview["strategy"]["matrix"]["include"]
    assert [m["stack"] for m in matrix] == ["dev", "prod"]
    assert preview["environment"] == "${{ matrix.environment }}"
    commands = {
        m["stack"]: [c for c in runs(preview, m) if "tts-fleet deploy" in c] for m in matrix
    }
    for stack, lines in commands.items():
        assert lines == [
            f".venv/bin/tts-fleet deploy preview --stack {stack} --json | tee preview.json"
        ]


def test_preview_posts_the_summary_on_the_pull_request() -> None:
    preview = load("preview.yml")["jobs"]["preview"]
    (post,) = uses(preview, "actions/github-script")
    assert post["if"].startswith("always()")
    script = post["with"]["script"]
    assert "preview.json" in script
    assert "createComment" in script and "updateComment" in script
    assert "core.summary" in script
    assert index_of(preview, lambda s: s.get("id") == "preview") < steps(preview).index(post)


def test_deploy_dev_on_push_to_main() -> None:
    workflow = load("deploy.yml")
    assert workflow["on"]["push"] == {"branches": ["main"]}
    dev = workflow["jobs"]["dev"]
    assert dev["if"] == "github.event_name == 'push'"
    assert dev["environment"] == "dev"
    assert_oidc(dev)
    assert "make test" in runs(dev)
    assert [c for c in runs(dev) if "tts-fleet deploy" in c] == [
        ".venv/bin/tts-fleet deploy up --stack dev --yes"
    ]


def test_deploy_prod_on_manual_dispatch_with_approval() -> None:
    workflow = load("deploy.yml")
    assert "workflow_dispatch" in workflow["on"]
    prod = workflow["jobs"]["prod"]
    assert prod["if"] == (
        "github.event_name == 'workflow_dispatch' && github.ref == 'refs/heads/main'"
    )
    assert prod["environment"] == "production"  # required reviewers live on this environment
    assert_oidc(prod)
    assert [c for c in runs(prod) if "tts-fleet deploy" in c] == [
        ".venv/bin/tts-fleet deploy up --stack prod --yes"
    ]
    assert prod["concurrency"]["cancel-in-progress"] is False


@pytest.mark.processes
def test_the_region_comes_from_each_stack_file(tmp_path: Path) -> None:
    expected = {}
    for stack in ("dev", "prod"):
        document = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
        expected[stack] = f"region={document['config'].get('aws:region', 'us-east-1')}\n"
    preview = load("preview.yml")["jobs"]["preview"]
    deploy = load("deploy.yml")["jobs"]
    for stack in ("dev", "prod"):
        assert run_region_step(preview, stack, tmp_path) == expected[stack]
    assert (
        run_region_step(deploy["dev"], deploy["dev"]["env"]["STACK"], tmp_path) == expected["dev"]
    )
    assert (
        run_region_step(deploy["prod"], deploy["prod"]["env"]["STACK"], tmp_path)
        == expected["prod"]
    )


def test_preview_installs_the_infra_extra_before_it_previews() -> None:
    preview = load("preview.yml")["jobs"]["preview"]
    installs = [c for c in runs(preview) if "pip install" in c]
    # The base install has no Pulumi SDK; the driver and the program need the infra extra.
    assert installs == [".venv/bin/pip install --quiet -e '.[infra]'"]
    install = index_of(preview, lambda s: "pip install" in str(s.get("run", "")))
    assert install < index_of(preview, lambda s: s.get("id") == "preview")


@pytest.mark.parametrize("job", ["dev", "prod"])
def test_deploy_jobs_deploy_from_the_make_test_venv_which_has_the_infra_extra(job: str) -> None:
    steps_ = steps(load("deploy.yml")["jobs"][job])
    make_test = next(i for i, s in enumerate(steps_) if s.get("run") == "make test")
    deploy = next(i for i, s in enumerate(steps_) if "tts-fleet deploy" in str(s.get("run", "")))
    assert make_test < deploy
    # `make test` installs .[dev] into .venv; dev must pull in infra for the deploy to work.
    assert "$(BIN)/pip install --quiet -e '.[dev]'" in (ROOT / "Makefile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert any(r.startswith("tts-fleet[") and "infra" in r for r in extras["dev"])
    assert {r.split(">")[0] for r in extras["infra"]} == {"pulumi", "pulumi-aws"}


# The rest of a first `up` after the build (VPC, NAT, endpoints, the service): a margin on
# top of the build waiter, which itself allows the CodeBuild timeout plus 10 minutes.
UP_BESIDES_THE_BUILD_SECONDS = 30 * 60
# STS AssumeRoleWithWebIdentity DurationSeconds: 900..43200 (and at most the role's
# MaxSessionDuration). https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html
MAX_SESSION_SECONDS = 43_200


@pytest.mark.parametrize("job", ["dev", "prod"])
def test_deploy_sessions_outlast_the_image_build(job: str) -> None:
    from components.image_build import BUILD_TIMEOUT_MINUTES, WAIT_TIMEOUT_SECONDS

    (creds,) = uses(load("deploy.yml")["jobs"][job], "aws-actions/configure-aws-credentials")
    duration = creds["with"]["role-duration-seconds"]
    assert isinstance(duration, int)
    assert WAIT_TIMEOUT_SECONDS >= BUILD_TIMEOUT_MINUTES * 60
    assert WAIT_TIMEOUT_SECONDS + UP_BESIDES_THE_BUILD_SECONDS <= duration <= MAX_SESSION_SECONDS
    ci = (ROOT / "docs" / "ci.md").read_text()
    assert "MaxSessionDuration" in ci and str(duration) in ci


def test_preview_sessions_keep_the_default_length() -> None:
    # A preview runs no build (the build resource acts only on create and update), so its
    # read-only role needs no longer session than the 1 h default.
    (creds,) = uses(load("preview.yml")["jobs"]["preview"], "aws-actions/configure-aws-credentials")
    assert "role-duration-seconds" not in creds["with"]
