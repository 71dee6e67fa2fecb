"""The CI workflows, parsed: triggers, which jobs run on which event, their environments,
permissions and secrets, the pinned actions, and the commands they run.

This checks what the YAML asks GitHub for; it cannot prove GitHub runs it (that needs a
push to a repository with the environments and secrets described in docs/ci.md). What
enforces the split on GitHub's side (environment branch rules, required reviewers, no
repository-level secrets, OIDC trust per environment) is settings, documented there.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
WORKFLOWS = ROOT / ".github" / "workflows"
ROLE = "${{ secrets.AWS_ROLE_ARN }}"
BACKEND_SECRETS = {"PULUMI_ACCESS_TOKEN", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE"}
# The environments whose secrets may reach a pull request's code: the dev preview's, or none.
PULL_REQUEST_ENVIRONMENTS = {None, "dev-preview"}

_SECRET = re.compile(r"\$\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
_USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)\s*(?:#\s*(\S+))?\s*$")
_RELEASE = re.compile(r"^v\d+\.\d+\.\d+$")


def workflow_names() -> list[str]:
    return sorted(p.name for p in WORKFLOWS.glob("*.yml"))


def load(name: str) -> dict[str, Any]:
    document: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the bare key `on` as the boolean True.
    document["on"] = document.pop(True, document.get("on"))
    return document


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = job["steps"]
    return found


def fill(text: str, job: dict[str, Any]) -> str:
    """`text` with the job's `$STACK` filled in."""
    stack = job.get("env", {}).get("STACK")
    return text.replace('"$STACK"', stack) if stack else text


def runs(job: dict[str, Any]) -> list[str]:
    """Every shell line the job runs, with `$STACK` filled in."""
    lines = [
        fill(line, job).strip() for s in steps(job) for line in str(s.get("run", "")).splitlines()
    ]
    return [line for line in lines if line]


def uses(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in steps(job) if str(s.get("uses", "")).split("@")[0] == action]


def index_of(job: dict[str, Any], predicate: Any) -> int:
    return next(i for i, s in enumerate(steps(job)) if predicate(s))


def secrets_in(node: Any) -> set[str]:
    """The names of every `${{ secrets.X }}` anywhere in a parsed YAML node."""
    if isinstance(node, dict):
        return set().union(*(secrets_in(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(secrets_in(v) for v in node))
    return set(_SECRET.findall(node)) if isinstance(node, str) else set()


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


# ---------------------------------------------------------------- which jobs run on which event

_TOKEN = re.compile(r"\s*(?:('[^']*')|(==|!=|&&|\|\||!|\(|\))|([A-Za-z_][\w.-]*))")


def evaluate(condition: str, github: dict[str, Any]) -> bool:
    """A job's `if:` under the `github` context, for the subset of GitHub's expression syntax
    the workflows use: context paths, 'strings', ==, !=, !, &&, || and parentheses. Strings
    compare case-insensitively and a missing path is null, as on GitHub."""
    expression = condition.strip()
    if expression.startswith("${{") and expression.endswith("}}"):
        expression = expression[3:-2]
    values: list[Any] = []
    python: list[str] = []
    position = 0
    while position < len(expression.rstrip()):
        match = _TOKEN.match(expression, position)
        assert match, f"unsupported expression at {expression[position:]!r}"
        literal, operator, path = match.groups()
        if literal is not None:
            values.append(literal[1:-1].lower())
            python.append(f"v[{len(values) - 1}]")
        elif operator is not None:
            python.append({"&&": "and", "||": "or", "!": "not"}.get(operator, operator))
        else:
            head, *rest = path.split(".")
            assert head == "github", f"unsupported context {path!r}"
            value: Any = github
            for key in rest:
                value = value.get(key) if isinstance(value, dict) else None
            values.append(value.lower() if isinstance(value, str) else value)
            python.append(f"v[{len(values) - 1}]")
        position = match.end()
    return bool(eval(" ".join(python), {"__builtins__": {}}, {"v": values}))


def event(name: str, ref: str, *, head_repo: str | None = None) -> dict[str, Any]:
    """The `github` context of a run in repository owner/repo."""
    context: dict[str, Any] = {"event_name": name, "ref": ref, "repository": "owner/repo"}
    if name == "pull_request":
        context["base_ref"] = "main"
        pull_request = {"number": 7, "head": {"repo": {"full_name": head_repo}}}
        context["event"] = {"pull_request": pull_request}
    return context


MERGE_REF = "refs/pull/7/merge"
EVENTS = {
    "pull request from a branch": event("pull_request", MERGE_REF, head_repo="owner/repo"),
    "pull request from a fork": event("pull_request", MERGE_REF, head_repo="fork/repo"),
    "push to main": event("push", "refs/heads/main"),
    "push to another branch": event("push", "refs/heads/feature"),
    "run by hand on main": event("workflow_dispatch", "refs/heads/main"),
    "run by hand on another branch": event("workflow_dispatch", "refs/heads/feature"),
    "weekly schedule": event("schedule", "refs/heads/main"),
}
PULL_REQUESTS = [name for name in EVENTS if name.startswith("pull request")]


def triggered(workflow: dict[str, Any], github: dict[str, Any]) -> bool:
    """Whether the workflow starts at all: its `on:` event and branch filter."""
    name = github["event_name"]
    if name not in workflow["on"]:
        return False
    branches = (workflow["on"][name] or {}).get("branches")
    if branches is None:
        return True
    branch = (
        github["base_ref"] if name == "pull_request" else github["ref"].removeprefix("refs/heads/")
    )
    return branch in branches


def jobs_that_run(workflow: dict[str, Any], github: dict[str, Any]) -> dict[str, Any]:
    """job id → job, for the jobs that run on this event (a job whose `needs` is skipped is
    skipped too)."""
    if not triggered(workflow, github):
        return {}
    ran: dict[str, Any] = {}
    for job_id, job in workflow["jobs"].items():
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        condition = job.get("if")
        if all(n in ran for n in needs) and (condition is None or evaluate(condition, github)):
            ran[job_id] = job
    return ran


def previewed_stacks(github: dict[str, Any]) -> dict[str, str | None]:
    """stack → environment, for every `tts-fleet deploy preview` that runs on this event."""
    stacks: dict[str, str | None] = {}
    for job in jobs_that_run(load("preview.yml"), github).values():
        for line in runs(job):
            if "tts-fleet deploy preview" in line:
                stack = line.split("--stack ")[1].split()[0]
                assert stack not in stacks, f"{stack} previewed twice"
                stacks[stack] = job.get("environment")
    return stacks


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        ("pull request from a branch", {"dev": "dev-preview"}),
        ("pull request from a fork", {}),  # no secrets, no OIDC token: only the tests run
        ("push to main", {"prod": "prod-preview"}),
        ("push to another branch", {}),
        ("run by hand on main", {"prod": "prod-preview"}),
        ("run by hand on another branch", {}),
        ("weekly schedule", {}),
    ],
)
def test_the_preview_matrix_pull_requests_dev_only_prod_only_from_main(
    when: str, expected: dict[str, str]
) -> None:
    assert previewed_stacks(EVENTS[when]) == expected


def test_the_evaluator_reads_conditions_as_github_does() -> None:
    # The matrix above is only as good as this reading of `if:`.
    pr = EVENTS["pull request from a branch"]
    assert evaluate("github.event_name == 'pull_request'", pr)
    assert evaluate("${{ github.event_name == 'PULL_REQUEST' }}", pr)  # case-insensitive
    assert not evaluate("github.event_name != 'pull_request' || github.ref == 'x'", pr)
    assert evaluate("!(github.ref == 'refs/heads/main') && github.event.nothing == github.x", pr)
    assert not evaluate("github.event.pull_request.head.repo.full_name == 'fork/repo'", pr)
    with pytest.raises(AssertionError, match="unsupported"):
        evaluate("startsWith(github.ref, 'refs/heads/')", pr)


def test_the_jobs_and_their_environments() -> None:
    environments = {
        name: {job_id: job.get("environment") for job_id, job in load(name)["jobs"].items()}
        for name in workflow_names()
    }
    assert environments == {
        "audit.yml": {"pip-audit": None},
        "deploy.yml": {"dev": "dev", "prod": "production"},
        "preview.yml": {"test": None, "preview-dev": "dev-preview", "preview-prod": "prod-preview"},
    }


@pytest.mark.parametrize("when", PULL_REQUESTS)
def test_no_pull_request_job_holds_the_deploy_role_or_prod_secrets(when: str) -> None:
    ran = {
        (name, job_id): job
        for name in workflow_names()
        for job_id, job in jobs_that_run(load(name), EVENTS[when]).items()
    }
    assert ("preview.yml", "test") in ran and ("audit.yml", "pip-audit") in ran
    for (name, job_id), job in ran.items():
        # Secrets resolve per environment: a PR job sees the dev preview's or none at all.
        assert job.get("environment") in PULL_REQUEST_ENVIRONMENTS, (name, job_id)
        if job.get("environment") is None:
            assert secrets_in(job) == set(), (name, job_id)
        assert not [line for line in runs(job) if re.search(r"tts-fleet deploy (?!preview)", line)]
        assert not [line for line in runs(job) if "--stack prod" in line]


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml", "audit.yml"])
def test_secrets_only_in_the_steps_that_use_them(name: str) -> None:
    workflow = load(name)
    assert secrets_in(workflow.get("env", {})) == set()  # would reach every job
    for job_id, job in workflow["jobs"].items():
        assert secrets_in(job.get("env", {})) == set(), job_id  # would reach the install
        for step in steps(job):
            found = secrets_in(step)
            if "configure-aws-credentials" in str(step.get("uses")):
                assert found == {"AWS_ROLE_ARN"}
                assert step["with"]["role-to-assume"] == ROLE
            elif "tts-fleet deploy" in str(step.get("run")):
                assert found == BACKEND_SECRETS
                assert set(step["env"]) == BACKEND_SECRETS
            else:
                assert found == set(), (job_id, step.get("name") or step.get("uses"))


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml", "audit.yml"])
def test_id_token_write_only_in_jobs_that_assume_an_aws_role(name: str) -> None:
    workflow = load(name)
    assert workflow["permissions"] == {"contents": "read"}  # jobs widen only what they need
    for job_id, job in workflow["jobs"].items():
        assumes = bool(uses(job, "aws-actions/configure-aws-credentials"))
        token = job.get("permissions", {}).get("id-token")
        assert (token == "write") == assumes, job_id
        assert token in (None, "write"), job_id


def test_every_action_is_pinned_by_commit_sha_with_its_release_in_a_comment() -> None:
    pins: dict[str, set[tuple[str, str]]] = {}
    for name in workflow_names():
        for job in load(name)["jobs"].values():
            for step in steps(job):
                if "uses" in step:
                    assert _PINNED.match(step["uses"]), (name, step["uses"])
        for line in (WORKFLOWS / name).read_text().splitlines():
            if match := _USES_LINE.match(line):
                reference, release = match.groups()
                assert release and _RELEASE.match(release), (name, line)
                action, sha = reference.split("@")
                pins.setdefault(action, set()).add((sha, release))
    # One version of each action across the workflows, so a bump is one search-and-replace.
    assert {action: len(versions) for action, versions in pins.items()} == {
        "actions/checkout": 1,
        "actions/setup-python": 1,
        "actions/github-script": 1,
        "aws-actions/configure-aws-credentials": 1,
        "pulumi/actions": 1,
        "pypa/gh-action-pip-audit": 1,
    }


def test_the_pin_check_catches_a_tag_or_a_short_sha() -> None:
    for reference in ("actions/checkout@v4", "actions/checkout@11d5960", "actions/checkout@main"):
        assert not _PINNED.match(reference)
    assert _PINNED.match("actions/checkout@" + "a" * 40)
    line = "      - uses: actions/checkout@" + "a" * 40 + " # v4.4.0"
    match = _USES_LINE.match(line)
    assert match and match.groups() == ("actions/checkout@" + "a" * 40, "v4.4.0")
    assert not _RELEASE.match("v4")  # the comment names the exact release, not the major


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml", "audit.yml"])
def test_no_long_lived_keys_and_no_token_left_in_the_checkout(name: str) -> None:
    text = (WORKFLOWS / name).read_text()
    for secret in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "aws-access-key-id"):
        assert secret not in text
    for job in load(name)["jobs"].values():
        for checkout in uses(job, "actions/checkout"):
            # The branch's code runs after the checkout; it gets no GITHUB_TOKEN from .git/config.
            assert checkout["with"]["persist-credentials"] is False


def test_preview_triggers_and_the_test_job() -> None:
    workflow = load("preview.yml")
    assert workflow["on"] == {
        "pull_request": {"branches": ["main"]},
        "push": {"branches": ["main"]},
        "workflow_dispatch": None,
    }
    test_job = workflow["jobs"]["test"]
    assert "make test" in runs(test_job)
    assert uses(test_job, "actions/setup-python")[0]["with"]["python-version"] == "3.11"
    assert "permissions" not in test_job  # the workflow's contents: read


@pytest.mark.parametrize(
    ("job_id", "stack", "permissions"),
    [
        ("preview-dev", "dev", {"contents": "read", "id-token": "write", "pull-requests": "write"}),
        ("preview-prod", "prod", {"contents": "read", "id-token": "write"}),
    ],
)
def test_preview_jobs_test_first_then_preview_their_stack(
    job_id: str, stack: str, permissions: dict[str, str]
) -> None:
    job = load("preview.yml")["jobs"][job_id]
    assert job["needs"] == "test"
    assert job["permissions"] == permissions
    assert job["env"]["STACK"] == stack
    assert_oidc(job)
    assert [c for c in runs(job) if "tts-fleet deploy" in c] == [
        f".venv/bin/tts-fleet deploy preview --stack {stack} --json | tee preview.json"
    ]


@pytest.mark.parametrize(("job_id", "comment"), [("preview-dev", True), ("preview-prod", False)])
def test_preview_summary_on_the_pull_request_for_dev_and_in_the_run_for_prod(
    job_id: str, comment: bool
) -> None:
    job = load("preview.yml")["jobs"][job_id]
    (post,) = uses(job, "actions/github-script")
    assert post["if"].startswith("always()")
    script = post["with"]["script"]
    assert "require('./.github/scripts/preview_summary.js')" in script
    assert f"stack: process.env.STACK, comment: {str(comment).lower()} " in script
    module = (ROOT / ".github" / "scripts" / "preview_summary.js").read_text()
    assert "preview.json" in module and "core.summary" in module
    assert "createComment" in module and "updateComment" in module
    assert module.index("if (!comment)") < module.index("listComments")
    assert index_of(job, lambda s: s.get("id") == "preview") < steps(job).index(post)
    # Commenting needs pull-requests: write, which only the pull-request job has.
    assert ("pull-requests" in job["permissions"]) is comment


def test_deploy_dev_on_push_to_main() -> None:
    workflow = load("deploy.yml")
    assert workflow["on"]["push"] == {"branches": ["main"]}
    assert "pull_request" not in workflow["on"]
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


def test_deploys_run_only_from_main() -> None:
    deploy = load("deploy.yml")
    ran = {when: set(jobs_that_run(deploy, github)) for when, github in EVENTS.items()}
    assert ran == {
        "pull request from a branch": set(),
        "pull request from a fork": set(),
        "push to main": {"dev"},
        "push to another branch": set(),
        "run by hand on main": {"prod"},
        "run by hand on another branch": set(),
        "weekly schedule": set(),
    }


@pytest.mark.parametrize("job_id", ["preview-dev", "preview-prod"])
def test_preview_installs_the_infra_extra_before_it_previews(job_id: str) -> None:
    preview = load("preview.yml")["jobs"][job_id]
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


@pytest.mark.parametrize("job_id", ["preview-dev", "preview-prod"])
def test_preview_sessions_keep_the_default_length(job_id: str) -> None:
    # A preview runs no build (the build resource acts only on create and update), so its
    # view-only role needs no longer session than the 1 h default.
    job = load("preview.yml")["jobs"][job_id]
    (creds,) = uses(job, "aws-actions/configure-aws-credentials")
    assert "role-duration-seconds" not in creds["with"]


def test_the_audit_runs_pip_audit_over_the_installed_set_and_the_worker_requirements() -> None:
    workflow = load("audit.yml")
    assert set(workflow["on"]) == {"pull_request", "push", "schedule", "workflow_dispatch"}
    assert workflow["on"]["schedule"]  # advisories appear without a code change
    (job,) = workflow["jobs"].values()
    assert "environment" not in job and "permissions" not in job and secrets_in(job) == set()
    lines = runs(job)
    install = lines.index(".venv/bin/pip install --quiet -e '.[dev]'")
    export = lines.index(".venv/bin/pip freeze --exclude-editable > audit-requirements.txt")
    assert install < export
    audits = uses(job, "pypa/gh-action-pip-audit")
    assert [(a["with"]["inputs"], a["with"].get("no-deps", False)) for a in audits] == [
        ("audit-requirements.txt", True),  # exact pins from the venv: nothing to resolve
        ("worker/requirements.txt", False),
    ]
    assert (ROOT / "worker" / "requirements.txt").is_file()
    freeze = index_of(job, lambda s: "pip freeze" in str(s.get("run", "")))
    assert freeze < steps(job).index(audits[0])


def test_the_audit_needs_the_internet_so_it_is_not_in_the_local_ci() -> None:
    assert "audit" not in (ROOT / ".ci" / "run").read_text()
    assert "pip-audit" not in (ROOT / "Makefile").read_text()


def test_dependabot_keeps_the_pinned_actions_current() -> None:
    config = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text())
    assert config["version"] == 2
    (update,) = [u for u in config["updates"] if u["package-ecosystem"] == "github-actions"]
    assert update["directory"] == "/" and update["schedule"]["interval"] == "weekly"
