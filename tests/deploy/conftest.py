from __future__ import annotations

from pathlib import Path

import pytest

PROJECT = "name: tts-fleet\nruntime: python\n"
DEV = """config:
  aws:region: us-east-1
  tts-fleet:scaling:
    minWorkers: 0
    maxWorkers: 4
"""
PROD = """config:
  tts-fleet:scaling:
    minWorkers: 1
    maxWorkers: 40
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory with a dev and a prod stack file (the driver only reads them)."""
    (tmp_path / "Pulumi.yaml").write_text(PROJECT)
    (tmp_path / "Pulumi.dev.yaml").write_text(DEV)
    (tmp_path / "Pulumi.prod.yaml").write_text(PROD)
    return tmp_path
