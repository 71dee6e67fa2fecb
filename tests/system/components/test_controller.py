"""The controller's zipped code imports in a Python without this project's other dependencies
(a process); the rest of the component's tests are in tests/unit/components/test_controller.py."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from components import controller as component
from tests.unit.components.test_controller import archive_bytes

# What the Lambda runtime lacks: the handler must import without any of these.
NOT_IN_THE_RUNTIME = ("pydantic", "worker", "pulumi", "pulumi_aws", "yaml", "rich", "click")


IMPORT_CHECK = """
import importlib.abc, sys
blocked = set(sys.argv[2].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is not in the Lambda runtime")
        return None
sys.meta_path.insert(0, Block())
sys.path.insert(0, sys.argv[1])
import tts_fleet.controller.handler as handler
assert handler.__file__.startswith(sys.argv[1]), handler.__file__
print(handler.handle.__name__)
"""


@pytest.mark.processes
def test_the_zipped_handler_imports_with_only_boto3(tmp_path: Path) -> None:
    with zipfile.ZipFile(io.BytesIO(archive_bytes(component.code_archive()))) as zipped:
        zipped.extractall(tmp_path / "code")
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK, str(tmp_path / "code"), ",".join(NOT_IN_THE_RUNTIME)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "handle"
