"""Drive `pulumi preview/up/destroy/refresh` for one stack with the Automation API (CI).

The program is local source: a LocalWorkspace whose work dir is the project directory
(Pulumi.yaml, Pulumi.<stack>.yaml, __main__.py). Before any workspace exists, the stack file
merged with the `--set` values is validated with tts_fleet/config/models.py, and the guards run, so
bad input costs no Pulumi process. The stack comes from an injectable factory: tests pass a
recording fake and assert it was never called.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from tts_fleet.config.stack_file import stack_region
from tts_fleet.deploy.settings import ConfigError, Setting, SettingError, validate
from tts_fleet.exit_codes import ExitCode

Action = Literal["preview", "up", "destroy", "refresh", "outputs"]
ACTIONS: tuple[Action, ...] = ("preview", "up", "destroy", "refresh", "outputs")

MISSING_CLI = (
    "the Pulumi CLI is not on PATH; install it with "
    "`curl -fsSL https://get.pulumi.com | sh` "
    "(or see https://www.pulumi.com/docs/install/), then retry"
)
# The Pulumi SDKs are the `infra` extra: a plain `pip install tts-fleet` submits jobs only.
MISSING_SDK = (
    "the Pulumi Python SDK is not installed; install the infra extra with "
    "`pip install 'tts-fleet[infra]'` (in a checkout: `pip install -e '.[infra]'`), then retry"
)
# Stacks that need an explicit --yes for `up`.
PROTECTED_PREFIX = "prod"
# Change kinds printed even when zero; any other kind is printed when non-zero.
MAIN_CHANGES = ("create", "update", "delete", "same")


class DeployError(Exception):
    """A failure reported as one line with its exit code (Pulumi reported an error or drift:
    FAILED; a bad --set, stack config or refused guard: BAD_INPUT; no Pulumi: MISSING_TOOL)."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StackLike(Protocol):
    """The part of `pulumi.automation.Stack` this driver uses."""

    # `*args, **kwargs` of Any: the Automation API's many keyword options all fit.
    def set_all_config(self, config: Any, *, path: bool = False) -> None: ...
    def preview(self, *args: Any, **kwargs: Any) -> Any: ...
    def up(self, *args: Any, **kwargs: Any) -> Any: ...
    def destroy(self, *args: Any, **kwargs: Any) -> Any: ...
    def refresh(self, *args: Any, **kwargs: Any) -> Any: ...
    def outputs(self) -> Mapping[str, Any]: ...


# (stack name, project dir, create if missing) -> stack
StackFactory = Callable[[str, Path, bool], StackLike]
OnOutput = Callable[[str], None]


@dataclass(frozen=True)
class PreflightNote:
    """What `preview` shows of the GPU preflight: lines before the change summary, and the
    `preflight` member of --json (the check's own JSON, or why it did not run)."""

    lines: tuple[str, ...] = ()
    data: dict[str, Any] | None = None


# (merged stack config, stack name, region or None) -> the note; tests pass a canned one.
PreflightRun = Callable[[Any, str, str | None], PreflightNote]


@dataclass(frozen=True)
class Request:
    action: Action
    stack: str
    project_dir: Path = Path(".")
    settings: tuple[Setting, ...] = ()
    yes: bool = False
    expect_no_changes: bool = False


@dataclass
class Report:
    """What an action produced: `data` for --json, `lines` for people, `code` to exit with."""

    data: dict[str, Any]
    lines: list[str] = field(default_factory=list)
    code: ExitCode = ExitCode.OK
    error: str = ""  # one line for stderr when code != 0


def open_stack(stack: str, project_dir: Path, create: bool) -> StackLike:
    """The real factory: a LocalWorkspace over `project_dir`, selecting (or creating) `stack`."""
    try:
        from pulumi import automation as auto  # heavy (gRPC); only once input is known good
    except ImportError as error:  # installed without the infra extra
        raise DeployError(ExitCode.MISSING_TOOL, MISSING_SDK) from error
    if shutil.which("pulumi") is None:
        raise DeployError(ExitCode.MISSING_TOOL, MISSING_CLI)

    opener = auto.create_or_select_stack if create else auto.select_stack
    try:
        return opener(stack_name=stack, work_dir=str(project_dir))
    except FileNotFoundError as error:  # `pulumi` vanished between the check and the call
        raise DeployError(ExitCode.MISSING_TOOL, MISSING_CLI) from error


def check_request(request: Request) -> Any:
    """Everything decided without Pulumi: guards, then the merged stack config (returned;
    None for `outputs`, which reads no config)."""
    if not (request.project_dir / "Pulumi.yaml").is_file():
        raise DeployError(
            ExitCode.BAD_INPUT,
            f"no Pulumi.yaml in {str(request.project_dir)!r}; pass --project-dir",
        )
    name = request.stack.rsplit("/", 1)[-1].lower()
    if request.action == "up" and name.startswith(PROTECTED_PREFIX) and not request.yes:
        raise DeployError(
            ExitCode.BAD_INPUT,
            f"refusing to run up on protected stack {request.stack!r} without --yes",
        )
    if request.action == "destroy" and not request.yes:
        raise DeployError(
            ExitCode.BAD_INPUT,
            f"destroy deletes every resource of {request.stack!r}; pass --yes",
        )
    if request.action == "outputs":
        return None
    return validate(request.project_dir, request.stack, request.settings)


def run(
    request: Request,
    factory: StackFactory,
    on_output: OnOutput,
    preflight: PreflightRun | None = None,
) -> Report:
    """Checks the request, opens the stack, applies --set values, runs the action; a preview
    runs the GPU preflight first (`preflight`) and shows it before its change summary."""
    try:
        cfg = check_request(request)
    except (ConfigError, SettingError) as error:
        raise DeployError(ExitCode.BAD_INPUT, str(error)) from error
    try:
        stack = factory(request.stack, request.project_dir, request.action in ("preview", "up"))
        if request.settings:
            stack.set_all_config(_config_map(request.settings), path=True)
        note = None
        if request.action == "preview" and preflight is not None:
            note = preflight(cfg, request.stack, _region(request))
        report = _RUNNERS[request.action](stack, request, on_output)
        return _with_preflight(report, note)
    except Exception as error:
        if not _is_pulumi_error(error):
            raise
        raise DeployError(ExitCode.FAILED, _pulumi_failure(request, error)) from error


def _region(request: Request) -> str | None:
    """The stack's region: a `--set aws:region=…`, else the stack file's `aws:region`."""
    for setting in request.settings:
        if setting.key == "aws:region":
            return setting.text
    return stack_region(request.stack.rsplit("/", 1)[-1], request.project_dir)


def _with_preflight(report: Report, note: PreflightNote | None) -> Report:
    if note is None:
        return report
    report.lines[:0] = note.lines
    report.data["preflight"] = note.data
    return report


def preflight_note(cfg: Any, stack: str, region: str | None) -> PreflightNote:
    """The real preflight for `preview`, with the default boto3 session. A check that cannot
    run or fails is a warning line here: the preview itself still runs and decides the exit."""
    import boto3

    from tts_fleet.deploy.preflight import PreflightError, check_stack, render

    try:
        result = check_stack(cfg, stack, boto3.Session, region)
    except PreflightError as error:
        line = f"warning: preflight did not run: {error}"
        return PreflightNote((line,), {"ok": False, "error": str(error)})
    return PreflightNote(tuple(render(result).splitlines()), result.as_json())


def _config_map(settings: tuple[Setting, ...]) -> dict[str, Any]:
    from pulumi.automation import ConfigValue

    # The raw text: `config set --path` turns "12" into a number and "true" into a bool.
    return {s.key: ConfigValue(value=s.text) for s in settings}


def _preview(stack: StackLike, request: Request, on_output: OnOutput) -> Report:
    result = stack.preview(on_output=on_output, on_error=on_output, diff=True)
    changes = normalise_changes(result.change_summary)
    pending = sum(n for kind, n in changes.items() if kind != "same")
    report = _report(request, changes=changes, pending=pending)
    if request.expect_no_changes and pending:
        report.code = ExitCode.FAILED
        report.error = f"drift: {pending} pending change(s) in stack {request.stack!r}"
        report.data.update(ok=False, error=report.error)
    return report


def _up(stack: StackLike, request: Request, on_output: OnOutput) -> Report:
    result = stack.up(on_output=on_output, on_error=on_output)
    outputs = plain_outputs(result.outputs)
    changes = normalise_changes(result.summary.resource_changes)
    report = _report(request, changes=changes, outputs=outputs)
    report.lines.extend(output_lines(outputs))
    return report


def _destroy(stack: StackLike, request: Request, on_output: OnOutput) -> Report:
    result = stack.destroy(on_output=on_output, on_error=on_output)
    return _report(request, changes=normalise_changes(result.summary.resource_changes))


def _refresh(stack: StackLike, request: Request, on_output: OnOutput) -> Report:
    result = stack.refresh(on_output=on_output, on_error=on_output)
    return _report(request, changes=normalise_changes(result.summary.resource_changes))


def _outputs(stack: StackLike, request: Request, on_output: OnOutput) -> Report:
    outputs = plain_outputs(stack.outputs())
    return Report(
        data={"action": request.action, "stack": request.stack, "ok": True, "outputs": outputs},
        lines=output_lines(outputs),
    )


_RUNNERS: dict[str, Callable[[StackLike, Request, OnOutput], Report]] = {
    "preview": _preview,
    "up": _up,
    "destroy": _destroy,
    "refresh": _refresh,
    "outputs": _outputs,
}


def _report(request: Request, changes: dict[str, int], **extra: Any) -> Report:
    data = {"action": request.action, "stack": request.stack, "ok": True, "changes": changes}
    data.update(extra)
    return Report(data=data, lines=[change_line(request, changes)])


def normalise_changes(changes: Mapping[Any, int] | None) -> dict[str, int]:
    """`{OpType.CREATE: 2}` or `{"create": 2}` → `{"create": 2, "update": 0, ...}`."""
    counts = dict.fromkeys(MAIN_CHANGES, 0)
    for kind, count in (changes or {}).items():
        name = str(getattr(kind, "value", kind))
        counts[name] = counts.get(name, 0) + int(count)
    return counts


def change_line(request: Request, changes: dict[str, int]) -> str:
    """`preview dev: 3 create, 1 update, 0 delete, 10 same, 1 replace`."""
    shown = [kind for kind in changes if kind in MAIN_CHANGES or changes[kind]]
    counts = ", ".join(f"{changes[kind]} {kind}" for kind in shown)
    return f"{request.action} {request.stack}: {counts}"


def plain_outputs(outputs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Stack outputs as plain values; secrets stay masked."""
    plain: dict[str, Any] = {}
    for name, output in (outputs or {}).items():
        plain[name] = "[secret]" if getattr(output, "secret", False) else output.value
    return plain


def output_lines(outputs: Mapping[str, Any]) -> list[str]:
    if not outputs:
        return ["outputs: (none)"]
    return ["outputs:", *(f"  {name}: {value}" for name, value in sorted(outputs.items()))]


def _is_pulumi_error(error: Exception) -> bool:
    module = type(error).__module__
    # The Automation API raises its own CommandError family, and a plain RuntimeError from
    # preview when the engine emitted no summary event.
    return module.startswith("pulumi.automation") or (
        type(error) is RuntimeError and "summary event" in str(error)
    )


def _pulumi_failure(request: Request, error: Exception) -> str:
    # CommandError's text is "\n code: N\n stdout: ...\n stderr: ..."; its last stderr line
    # is Pulumi's own error (the full output has already streamed to the terminal).
    text = str(error)
    stdout, _, stderr = text.partition("\n stderr: ")
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    lines = lines or [line.strip() for line in stdout.splitlines() if line.strip()]
    detail = lines[-1] if lines else type(error).__name__
    detail = detail if len(detail) <= 300 else detail[:297] + "..."
    return f"pulumi {request.action} failed for stack {request.stack!r}: {detail}"
