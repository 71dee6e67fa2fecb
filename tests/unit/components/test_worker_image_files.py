"""The worker image's Dockerfile and requirements, read as files; worker/entrypoint.sh and the
Dockerfile's weights step run for real are in tests/system/components/test_worker_image_files.py."""

from __future__ import annotations

import re

from components.image import BUILD_ARGS, WorkerImageArgs, recognizer_build
from tests.lib.stack_support import WORKER_DIR
from tts_fleet.config.models import StackConfig
from worker.settings import DATA_DIR, WEIGHTS_DIR


def instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = (WORKER_DIR / "Dockerfile").read_text()
    joined = re.sub(
        r"\s*\\\n\s*",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    return [line.strip() for line in joined.splitlines() if line.strip()]


def weights_step() -> str:
    """The one RUN that can download weights: the one that names snapshot_download."""
    [step] = [line for line in instructions() if "snapshot_download" in line]
    return step


def test_dockerfile_layers_run_from_slowest_to_fastest_changing() -> None:
    lines = instructions()

    def index(prefix: str) -> int:
        return next(i for i, line in enumerate(lines) if line.startswith(prefix))

    cudnn = index('RUN python3 -m pip install "nvidia-cudnn-cu13')
    toolkit = index('RUN python3 -m pip install "cuda-toolkit[')
    torch = index('RUN python3 -m pip install "torch==')
    vllm = index('RUN python3 -m pip install "vllm==')
    weights = lines.index(weights_step())
    assert cudnn < toolkit < torch < vllm < weights
    assert index("ARG MODEL=") < index("ARG WEIGHTS=image") < weights
    assert weights < index("COPY requirements.txt") < index("COPY . /app/worker/")
    assert lines[-1] == 'ENTRYPOINT ["/app/worker/entrypoint.sh"]'
    assert any(line.startswith("ENV MODEL=") and "HF_HUB_OFFLINE=1" in line for line in lines)


def test_with_weights_s3_the_build_downloads_no_weights() -> None:
    # The weights step is a `case` on the WEIGHTS build arg: the hub is asked only under
    # `image)`; `s3)` runs no Python at all, and anything else fails the build.
    step = weights_step()
    branches = dict(re.findall(r"(\w+|\*)\) (.*?) ;;", step.removeprefix("RUN ")))
    assert set(branches) == {"image", "s3", "*"}
    assert branches["image"] == 'python3 -c "$snapshot"'
    assert (
        'snapshot_download(os.environ["MODEL"], revision=os.environ["MODEL_REVISION"])'
        in (step.split(" && ")[0])
    )
    assert "python" not in branches["s3"] and "huggingface" not in branches["s3"]
    assert branches["*"].endswith("exit 1")
    assert step.startswith("RUN snapshot=") and '&& case "$WEIGHTS" in' in step
    # The stack passes `worker.weights` as that build arg (and it is part of the image tag).
    assert "WEIGHTS" in BUILD_ARGS
    args = WorkerImageArgs(worker_dir=".", model="m", model_revision="r", weights="s3")
    assert args.build_args()["WEIGHTS"] == "s3"


def test_the_recognizer_is_built_in_only_for_qa_mode_asr_at_its_pinned_revision() -> None:
    # worker/asr_server.sh serves ASR_MODEL offline (HF_HUB_OFFLINE=1): the build must bake it
    # in, with vLLM's audio extra; a stack in another mode keeps its build args (so its tag).
    lines = instructions()
    assert (
        'RUN if [ -n "$ASR_MODEL" ]; then python3 -m pip install "vllm[audio]==${VLLM_VERSION}"; fi'
        in lines
    )
    assert weights_step().endswith(
        '&& if [ -n "$ASR_MODEL" ]; then MODEL="$ASR_MODEL" MODEL_REVISION="$ASR_MODEL_REVISION"'
        ' python3 -c "$snapshot"; fi'
    )
    assert {"ASR_MODEL", "ASR_MODEL_REVISION"} <= set(BUILD_ARGS)
    revision = "ab" * 20
    asr = StackConfig.from_raw(
        {"worker": {"qa": {"mode": "asr", "asrModelRevision": revision}}}
    ).worker
    assert recognizer_build(asr) == {
        "asr_model": "openai/whisper-large-v3-turbo",
        "asr_model_revision": revision,
    }
    assert recognizer_build(StackConfig().worker) == {}
    plain = WorkerImageArgs(worker_dir=".", model="m", model_revision="r")
    with_asr = WorkerImageArgs(
        worker_dir=".", model="m", model_revision="r", **recognizer_build(asr)
    )
    assert set(plain.build_args()) == {"BASE_IMAGE", "MODEL_REVISION", "WEIGHTS"}
    assert with_asr.build_args() == {
        **plain.build_args(),
        "ASR_MODEL": "openai/whisper-large-v3-turbo",
        "ASR_MODEL_REVISION": revision,
    }


def test_the_data_volume_is_declared_and_the_worker_s_own() -> None:
    # The task definition mounts its data volume at DATA_DIR (worker.weights: s3); ECS copies
    # the image's path into it, permissions included, only when the image declares it.
    lines = instructions()
    assert f"RUN mkdir -p {DATA_DIR} && chown worker {DATA_DIR}" in lines
    volume = lines.index(f'VOLUME ["{DATA_DIR}"]')
    assert volume > lines.index(f"RUN mkdir -p {DATA_DIR} && chown worker {DATA_DIR}")
    assert WEIGHTS_DIR.startswith(DATA_DIR + "/")
    assert lines[volume + 1 :].count("USER worker") == 1  # the worker runs with it mounted


def test_the_worker_s_own_requirements() -> None:
    requirements = (WORKER_DIR / "requirements.txt").read_text()
    assert [r.split(">=")[0] for r in requirements.splitlines() if r and r[0] != "#"] == [
        "boto3",
        "pydantic",
        "httpx",
        "soundfile",  # one encode of the joined samples per job (worker/speech.py)
    ]


def test_the_torch_pins_are_vllm_s_own() -> None:
    # vllm 0.30.0's wheel says `Requires-Dist: torch==2.13.0`, torchaudio 2.11.0,
    # torchvision 0.28.0; a torch pin of our own that differs would install torch twice.
    text = (WORKER_DIR / "Dockerfile").read_text()
    pins = dict(re.findall(r"^ARG (\w+_VERSION)=(\S+)$", text, flags=re.MULTILINE))
    assert {k: pins[k] for k in ("VLLM_VERSION", "TORCH_VERSION", "TORCHAUDIO_VERSION")} == {
        "VLLM_VERSION": "0.30.0",
        "TORCH_VERSION": "2.13.0",
        "TORCHAUDIO_VERSION": "2.11.0",
    }
