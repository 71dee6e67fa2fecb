"""A recording stand-in for `pulumi.automation.Stack` and the factory that hands it out.

It only records what the driver asked for and returns the Automation API's own result types
with canned counts; the logic under test (parsing, validation, guards, summaries) is real.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pulumi.automation import (
    DestroyResult,
    OutputValue,
    PreviewResult,
    RefreshResult,
    UpdateSummary,
    UpResult,
)


def _summary(changes: dict[str, int]) -> UpdateSummary:
    return UpdateSummary(
        kind="update",
        start_time=datetime(2026, 1, 1),
        message="",
        environment={},
        config={},
        result="succeeded",
        resource_changes=changes,
    )


@dataclass
class RecordingStack:
    changes: dict[str, int] = field(default_factory=lambda: {"create": 3, "same": 2})
    outputs_: dict[str, OutputValue] = field(default_factory=dict)
    error: Exception | None = None
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)

    def _record(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))
        if self.error is not None and name != "set_all_config":
            raise self.error

    def set_all_config(self, config: Any, *, path: bool = False) -> None:
        self._record("set_all_config", dict(config), path=path)

    def preview(self, **kwargs: Any) -> PreviewResult:
        self._record("preview", **kwargs)
        kwargs["on_output"]("preview line from pulumi")
        return PreviewResult(stdout="", stderr="", change_summary=dict(self.changes))

    def up(self, **kwargs: Any) -> UpResult:
        self._record("up", **kwargs)
        return UpResult("", "", _summary(self.changes), dict(self.outputs_))

    def destroy(self, **kwargs: Any) -> DestroyResult:
        self._record("destroy", **kwargs)
        return DestroyResult("", "", _summary(self.changes))

    def refresh(self, **kwargs: Any) -> RefreshResult:
        self._record("refresh", **kwargs)
        return RefreshResult("", "", _summary(self.changes))

    def outputs(self) -> dict[str, OutputValue]:
        self._record("outputs")
        return dict(self.outputs_)

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]


@dataclass
class RecordingFactory:
    stack: RecordingStack = field(default_factory=RecordingStack)
    opened: list[tuple[str, Path, bool]] = field(default_factory=list)

    def __call__(self, stack: str, project_dir: Path, create: bool) -> RecordingStack:
        self.opened.append((stack, project_dir, create))
        return self.stack
