"""`python -m worker.weights fetch` killed with SIGKILL mid-fetch, then run again: the second
run downloads only the files the first had not put in place, and DEST ends whole.

The fetch runs as its own process against the emulator behind a ThrottleProxy (each
connection served at 512 KiB/s, one connection), so the kill lands mid-snapshot at a moment
the test chooses; the proxy's request log says what each run fetched.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.lib.procs import ROOT, Processes, wait_for
from tests.lib.weights_snapshot import files_in, key_of, make_snapshot, upload
from tts_fleet.local.throttle import ThrottleProxy

pytestmark = pytest.mark.processes

KIB = 1024
SIZES = {f"shard-{i:02d}.safetensors": 256 * KIB for i in range(8)} | {"config.json": 200}


def start_fetch(uri: str, dest: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "worker.weights", "fetch", uri, str(dest)]
    with log.open("wb") as out:
        return subprocess.Popen(
            [*argv, "--connections", "1", "--part-mib", "1"], cwd=ROOT, env=env, stderr=out
        )


def fetched_keys(proxy: ThrottleProxy, bucket: str) -> set[str]:
    return {r.path.removeprefix(f"/{bucket}/") for r in proxy.requests if r.method == "GET"}


@pytest.mark.timeout(120)
def test_a_rerun_after_sigkill_downloads_only_the_missing_files(
    aws_env: dict[str, str], s3: Any, tmp_path: Path, procs: Processes
) -> None:
    contents = make_snapshot(tmp_path / "snapshot", SIZES)
    uri = upload(s3, tmp_path / "snapshot")
    bucket = uri.removeprefix("s3://").split("/")[0]
    dest = tmp_path / "dest"
    with ThrottleProxy(aws_env["AWS_ENDPOINT_URL"], bytes_per_second=512 * KIB) as proxy:
        env = {**aws_env, "AWS_ENDPOINT_URL": proxy.url}
        first = procs.add(start_fetch(uri, dest, env, tmp_path / "first.log"))
        wait_for(lambda: len(files_in(dest)) >= 3, 60, what="three files in place")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        in_place = files_in(dest)
        assert 3 <= len(in_place) < len(SIZES), "killed mid-snapshot"
        assert all(contents[path] == data for path, data in in_place.items())  # whole, or absent
        proxy.clear()
        second = procs.add(start_fetch(uri, dest, env, tmp_path / "second.log"))
        assert second.wait(60) == 0, (tmp_path / "second.log").read_text()
        missing = {key_of(path) for path in SIZES if path not in in_place}
        assert fetched_keys(proxy, bucket) == missing | {key_of("weights.json")}
    assert files_in(dest) == contents
