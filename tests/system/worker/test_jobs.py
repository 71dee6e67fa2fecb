"""worker/jobs.py imports without boto3, checked in a fresh interpreter (a process); the job
model is in tests/unit/worker/test_jobs.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.lib.procs import ROOT


@pytest.mark.processes
def test_jobs_module_does_not_import_boto3() -> None:
    code = "import sys, worker.jobs; print('boto3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "False"
