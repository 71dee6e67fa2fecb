"""The CI workflows, parsed: triggers, permissions, jobs, and the commands they run.

This checks what the YAML asks GitHub for; it cannot prove GitHub runs it (that needs a
push to a repository with the secrets described in the README).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"
ROLE = "${{ secrets.AWS_ROLE_ARN }}"


def load(name: str) -> dict[str, Any]:
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the bare key `on` as the boolean True.
    document["on"] = document.pop(True, document.get("on"))
    return document


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job["steps"]


def runs(job: dict[str, Any], matrix: dict[str, str] | None = None) -> list[str]:
    """Every shell line the job runs, with `${{ matrix.x }}` / `$STACK` filled in."""
    lines: list[str] = []
    for step in steps(job):
        for line in str(step.get("run", "")).splitlines():
            for key, value in (matrix or {}).items():
                line = line.replace(f"${{{{ matrix.{key} }}}}", value)
            if matrix and "stack" in matrix:
                line = line.replace('"$STACK"', matrix["stack"])
            lines.append(line.strip())
    return [line for line in lines if line]


def uses(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in steps(job) if str(s.get("uses", "")).split("@")[0] == action]


def index_of(job: dict[str, Any], predicate: Any) -> int:
    return next(i for i, s in enumerate(steps(job)) if predicate(s))


def assert_oidc(job: dict[str, Any]) -> None:
    assert job["permissions"]["id-token"] == "write"
    (creds,) = uses(job, "aws-actions/configure-aws-credentials")
    assert creds["with"]["role-to-assume"] == ROLE
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
