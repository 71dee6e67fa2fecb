"""The worker image's Dockerfile and requirements, read as files; worker/entrypoint.sh run for
real is in tests/system/components/test_worker_image_files.py."""

from __future__ import annotations

from tests.lib.stack_support import WORKER_DIR


def test_dockerfile_bakes_weights_before_the_worker_code() -> None:
    lines = [
        line.strip()
        for line in (WORKER_DIR / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def index(prefix: str) -> int:
        return next(i for i, line in enumerate(lines) if line.startswith(prefix))

    weights = index('RUN python3 -c "import os; from huggingface_hub import snapshot_download')
    assert index("ARG MODEL=") < weights
    assert weights < index("COPY requirements.txt") < index("COPY . /app/worker/")
    assert lines[-1] == 'ENTRYPOINT ["/app/worker/entrypoint.sh"]'
    assert "HF_HUB_OFFLINE=1 \\" in lines  # tasks never reach the hub at run time
    requirements = (WORKER_DIR / "requirements.txt").read_text()
    assert [r.split(">=")[0] for r in requirements.splitlines() if r and r[0] != "#"] == [
        "boto3",
        "pydantic",
        "httpx",
        "soundfile",  # one encode of the joined samples per job (worker/speech.py)
    ]
