"""The worker's environment (DESIGN §3.4), parsed once, with one readable line per problem."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from worker.jobs import DEFAULT_MAX_TEXT_CHARS

# SQS ReceiveMessage: WaitTimeSeconds is 0..20 (AWS SQS API reference, ReceiveMessage).
MAX_WAIT_TIME_SECONDS = 20
# SQS visibility timeout is 0..43,200 s (12 h) (AWS SQS developer guide, visibility timeout).
MAX_VISIBILITY_SECONDS = 43_200
# ECS task scale-in protection: ExpiresInMinutes is 1..2,880 (ECS developer guide).
MAX_PROTECTION_MINUTES = 2_880
DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
# vLLM-Omni's port inside the GPU task (worker/entrypoint.sh serves on it by default).
SPEECH_PORT = 8091
DEFAULT_SPEECH_URL = f"http://127.0.0.1:{SPEECH_PORT}"
# Not in _FIELDS: read with a botocore fallback below, but written under this one name.
REGION_ENV = "AWS_REGION"
# The `task_type` values vLLM-Omni accepts (OpenAICreateSpeechRequest.task_type, a Literal):
# anything else is a 400 on every request, so it is refused here, at start.
TaskType = Literal["CustomVoice", "VoiceDesign", "Base"]
TASK_TYPES: tuple[str, ...] = get_args(TaskType)
# How vLLM-Omni tells a checkpoint's task type from its path when its config has no
# tts_model_type (Qwen3TTSAdapter._get_model_variant): a marker ending a path component.
_VARIANT = re.compile(r"(?:^|[-_.])(custom[-_.]?voice|voice[-_.]?design|base)$")
_VARIANTS = {"customvoice": "CustomVoice", "voicedesign": "VoiceDesign", "base": "Base"}
# The drain (DESIGN §5.6) keeps the last min(5 s, 20 %) of STOP_TIMEOUT_SECONDS to release
# the messages it still holds (one ChangeMessageVisibilityBatch per 10: a round trip of
# 20-100 ms in a region); below this much that release overruns the budget and ECS SIGKILLs
# the worker with messages held for a whole visibility timeout.
RELEASE_RESERVE_MAX_SECONDS = 5.0
RELEASE_RESERVE_FRACTION = 0.2
MIN_RELEASE_SECONDS = 0.5
# After the drain, exiting (the last log lines, the threads' and the interpreter's end) takes
# up to min(1 s, 10 %) of STOP_TIMEOUT_SECONDS: the drain ends that much before the budget.
EXIT_RESERVE_MAX_SECONDS = 1.0
EXIT_RESERVE_FRACTION = 0.1
# Output checks (worker/qa/, DESIGN §5.3): off, the signal checks, or those plus a transcript.
QaMode = Literal["off", "basic", "asr"]
QA_MODES: tuple[str, ...] = get_args(QaMode)
# What a job whose pieces fail every attempt becomes: a `quality:` failure, or a stored output
# whose manifest says `qa.passed: false`.
QaOnFail = Literal["fail", "keep"]
QA_ON_FAIL: tuple[str, ...] = get_args(QaOnFail)
# The ASR server beside vLLM-Omni in the GPU task (worker/asr_server.sh), loopback only.
ASR_PORT = 8092
DEFAULT_ASR_URL = f"http://127.0.0.1:{ASR_PORT}"
DEFAULT_ASR_MODEL = "openai/whisper-large-v3-turbo"
WordTimestamps = Literal["off", "on"]
WORD_TIMESTAMPS: tuple[str, ...] = get_args(WordTimestamps)


class SettingsError(ValueError):
    """Misconfiguration; `str(error)` is one line naming every bad variable."""


@dataclass(frozen=True)
class Settings:
    queue_url: str
    dlq_url: str
    output_bucket: str
    output_prefix: str = ""
    aws_region: str = "us-east-1"
    speech_url: str = DEFAULT_SPEECH_URL
    speech_model: str = DEFAULT_MODEL
    speech_task_type: str = ""
    speech_timeout_seconds: float = 600.0
    speech_retries: int = 2
    speech_chunk_chars: int = 1_000
    concurrency: int = 4
    prefetch: int | None = None  # extra messages held ready; None = CONCURRENCY
    visibility_timeout: int = 300
    heartbeat_seconds: float = 100.0
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    stop_timeout_seconds: float = 120.0
    wait_time_seconds: int = MAX_WAIT_TIME_SECONDS
    health_timeout_seconds: float = 600.0
    retry_base_seconds: float = 10.0
    retry_max_seconds: float = 600.0
    worker_id: str = "worker"
    ecs_agent_uri: str = ""
    protection_expires_minutes: int = 60
    protection_renew_seconds: float = 1_800.0
    # The stack the worker belongs to: the `Stack` dimension of its metrics (worker/metrics.py).
    stack_name: str = ""
    # Output checks (worker/qa/): the mode, re-renders of a bad piece with a new seed, the word
    # error rate above which a transcript fails (mode asr), what a job that never passes becomes.
    qa_mode: QaMode = "basic"
    qa_retries: int = 2
    qa_max_wer: float = 0.2
    qa_on_fail: QaOnFail = "fail"
    asr_url: str = DEFAULT_ASR_URL
    asr_model: str = DEFAULT_ASR_MODEL
    # Each capacity type's worker-hour price (USD) from the stack's priced pools, for the
    # manifest's cost_usd (worker/throughput.py); empty: no estimate.
    pool_usd_per_hour: tuple[tuple[str, float], ...] = ()
    # Ask the speech server for word timestamps (`on` only with vLLM-Omni started with
    # --forced-aligner, which any other server refuses with a 400); `off`: sentence times are
    # estimated inside each measured piece (worker/timings.py).
    word_timestamps: WordTimestamps = "off"

    @property
    def release_reserve_seconds(self) -> float:
        """The end of the stop budget that the drain keeps for releasing what it holds."""
        return min(
            RELEASE_RESERVE_MAX_SECONDS, self.stop_timeout_seconds * RELEASE_RESERVE_FRACTION
        )

    @property
    def exit_reserve_seconds(self) -> float:
        """The very end of the stop budget, kept for exiting once the drain is done."""
        return min(EXIT_RESERVE_MAX_SECONDS, self.stop_timeout_seconds * EXIT_RESERVE_FRACTION)

    @property
    def protection_tick_seconds(self) -> float:
        """How often the renewal timer looks: a renewal lands within renew + tick seconds of
        the last one, and a refused PUT is retried this often."""
        return min(self.heartbeat_seconds, self.protection_renew_seconds / 2)


def _int(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


def _float(low: float, high: float = float("inf")) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = float(raw)
        if not low <= value <= high:
            raise ValueError(f"must be between {low:g} and {high:g}")
        return value

    return parse


def _text(raw: str) -> str:
    return raw


def _prices(raw: str) -> tuple[tuple[str, float], ...]:
    """A JSON object of capacity type → USD per worker-hour, e.g. {"spot": 0.44}."""
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < float("inf")
        for v in value.values()
    ):
        raise ValueError(
            'must be a JSON object of capacity type to USD per hour, e.g. {"spot": 0.44}'
        )
    return tuple(sorted((str(k), float(v)) for k, v in value.items()))


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in allowed:  # case matters: the server's Literal is exact
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return raw

    return parse


# env name -> (Settings field, parser, required)
_FIELDS: dict[str, tuple[str, Callable[[str], Any], bool]] = {
    "QUEUE_URL": ("queue_url", _text, True),
    "DLQ_URL": ("dlq_url", _text, True),
    "OUTPUT_BUCKET": ("output_bucket", _text, True),
    "OUTPUT_PREFIX": ("output_prefix", _text, False),
    "SPEECH_URL": ("speech_url", _text, False),
    "SPEECH_MODEL": ("speech_model", _text, False),
    "SPEECH_TASK_TYPE": ("speech_task_type", _choice(*TASK_TYPES), False),
    "SPEECH_TIMEOUT_SECONDS": ("speech_timeout_seconds", _float(0.1), False),
    "SPEECH_RETRIES": ("speech_retries", _int(0, 10), False),
    "SPEECH_CHUNK_CHARS": ("speech_chunk_chars", _int(50, 1_000_000), False),
    "CONCURRENCY": ("concurrency", _int(1, 256), False),
    "PREFETCH": ("prefetch", _int(0, 256), False),
    "VISIBILITY_TIMEOUT": ("visibility_timeout", _int(2, MAX_VISIBILITY_SECONDS), False),
    "HEARTBEAT_SECONDS": ("heartbeat_seconds", _float(0.1), False),
    "MAX_TEXT_CHARS": ("max_text_chars", _int(1, 10_000_000), False),
    "STOP_TIMEOUT_SECONDS": ("stop_timeout_seconds", _float(0), False),
    "WAIT_TIME_SECONDS": ("wait_time_seconds", _int(0, MAX_WAIT_TIME_SECONDS), False),
    "HEALTH_TIMEOUT_SECONDS": ("health_timeout_seconds", _float(0), False),
    "RETRY_BASE_SECONDS": ("retry_base_seconds", _float(0), False),
    "RETRY_MAX_SECONDS": ("retry_max_seconds", _float(0, MAX_VISIBILITY_SECONDS), False),
    "WORKER_ID": ("worker_id", _text, False),
    "ECS_AGENT_URI": ("ecs_agent_uri", _text, False),
    "PROTECTION_EXPIRES_MINUTES": (
        "protection_expires_minutes",
        _int(1, MAX_PROTECTION_MINUTES),
        False,
    ),
    "PROTECTION_RENEW_SECONDS": ("protection_renew_seconds", _float(0.1), False),
    "STACK_NAME": ("stack_name", _text, False),
    "QA_MODE": ("qa_mode", _choice(*QA_MODES), False),
    "QA_RETRIES": ("qa_retries", _int(0, 10), False),
    "QA_MAX_WER": ("qa_max_wer", _float(0, 1), False),
    "QA_ON_FAIL": ("qa_on_fail", _choice(*QA_ON_FAIL), False),
    "ASR_URL": ("asr_url", _text, False),
    "ASR_MODEL": ("asr_model", _text, False),
    "POOL_USD_PER_HOUR": ("pool_usd_per_hour", _prices, False),
    "WORD_TIMESTAMPS": ("word_timestamps", _choice(*WORD_TIMESTAMPS), False),
}


# Settings field -> env name: what `worker_env` may write, from the table `load_settings` reads.
_ENV_OF_FIELD = {field: name for name, (field, _, _) in _FIELDS.items()}
_ENV_OF_FIELD["aws_region"] = REGION_ENV
ENV_NAMES = frozenset(_ENV_OF_FIELD.values())  # every variable the worker reads


def worker_env(**settings: object) -> dict[str, Any]:
    """The env that `load_settings` reads back as these values, named by Settings field:
    `worker_env(queue_url=u, concurrency=4)` -> `{"QUEUE_URL": u, "CONCURRENCY": "4"}`.

    The one writer of this contract (the task definition, the local fleet and the tests use
    it), so a renamed variable cannot be written under its old name: an unknown field is a
    TypeError. A missing required one is not: `load_settings` names it. None leaves a
    variable unset (the worker's default). Plain ints and floats become text; anything else
    (text, or a `pulumi.Output` of text) is passed through untouched.
    """
    unknown = sorted(set(settings) - set(_ENV_OF_FIELD))
    if unknown:
        raise TypeError(f"not worker settings: {', '.join(unknown)}")
    return {_ENV_OF_FIELD[f]: _env_text(v) for f, v in settings.items() if v is not None}


def _env_text(value: object) -> object:
    if isinstance(value, bool):  # an int to Python, but no parser here reads "True"
        raise TypeError(f"no worker setting is a boolean: {value!r}")
    return str(value) if isinstance(value, int | float) else value


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Reads the environment; raises SettingsError listing every problem on one line."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, (field, parse, required) in _FIELDS.items():
        raw = env.get(name, "").strip()
        if not raw:
            if required:
                problems.append(f"{name} is required")
            continue
        try:
            values[field] = parse(raw)
        except ValueError as error:
            reason = "must be a number" if "could not convert" in str(error) else str(error)
            reason = "must be an integer" if "invalid literal" in reason else reason
            problems.append(f"{name}={raw!r}: {reason}")
    values.setdefault("worker_id", f"{socket.gethostname()}-{os.getpid()}")
    # botocore reads AWS_DEFAULT_REGION only; the contract (and ECS) names AWS_REGION.
    region = env.get(REGION_ENV, "").strip() or env.get("AWS_DEFAULT_REGION", "").strip()
    if region:
        values["aws_region"] = region
    else:
        problems.append("AWS_REGION is required (the queue's region)")
    if "VISIBILITY_TIMEOUT" in env and "HEARTBEAT_SECONDS" not in env and not problems:
        values["heartbeat_seconds"] = max(0.5, values.get("visibility_timeout", 300) / 3)
    if "PROTECTION_EXPIRES_MINUTES" in env and "PROTECTION_RENEW_SECONDS" not in env:
        values["protection_renew_seconds"] = values.get("protection_expires_minutes", 60) * 30
    if not problems:
        settings = Settings(**values)
        problems.extend(_consistency(settings))
    if problems:
        raise SettingsError("; ".join(problems))
    return settings


def _consistency(settings: Settings) -> list[str]:
    problems = []
    # The heartbeat must re-extend before the previous extension runs out.
    if settings.heartbeat_seconds >= settings.visibility_timeout:
        problems.append(
            f"HEARTBEAT_SECONDS={settings.heartbeat_seconds:g} must be shorter than "
            f"VISIBILITY_TIMEOUT={settings.visibility_timeout} (the extension it renews)"
        )
    # A renewal is due after renew seconds and seen at the next tick: both before the expiry.
    latest = settings.protection_renew_seconds + settings.protection_tick_seconds
    if latest >= settings.protection_expires_minutes * 60:
        problems.append(
            f"PROTECTION_RENEW_SECONDS={settings.protection_renew_seconds:g} plus the renewal "
            f"check interval {settings.protection_tick_seconds:g}s must be shorter than "
            f"PROTECTION_EXPIRES_MINUTES × 60 = {settings.protection_expires_minutes * 60}"
        )
    problems.extend(_stop_budget(settings))
    for name, url in (("QUEUE_URL", settings.queue_url), ("DLQ_URL", settings.dlq_url)):
        if not url.startswith(("http://", "https://")):
            problems.append(f"{name}={url!r}: must be an SQS queue URL (https://…)")
    return problems


MIN_STOP_TIMEOUT_SECONDS = MIN_RELEASE_SECONDS / RELEASE_RESERVE_FRACTION  # 2.5 s


def _stop_budget(settings: Settings) -> list[str]:
    """ECS SIGKILLs a task stopTimeout after SIGTERM. The rule: the drain's release reserve
    must hold a release (MIN_RELEASE_SECONDS), i.e. STOP_TIMEOUT_SECONDS ≥ 2.5. The long poll
    is not in it: the loop gives up on a poll at the stop and waits at most half the budget."""
    if settings.release_reserve_seconds >= MIN_RELEASE_SECONDS:
        return []
    return [
        f"STOP_TIMEOUT_SECONDS={settings.stop_timeout_seconds:g} is shorter than the shortest "
        f"drain, {MIN_STOP_TIMEOUT_SECONDS:g}s: the drain keeps the last 20 % of it to release "
        f"the messages it holds, and that takes up to {MIN_RELEASE_SECONDS:g}s"
    ]


# ---- The model snapshot from S3 (`worker.weights: s3`) ------------------------------------
# Not read by `python -m worker`: the task definition (components/service.py) writes them for
# worker/entrypoint.sh, which runs `python -m worker.weights fetch "$WEIGHTS_URI" "$WEIGHTS_DIR"`
# before vLLM starts and serves the directory. `tts-fleet weights upload` writes the snapshot
# and its manifest under `weights_prefix(model, revision)` of the stack's bucket.
WEIGHTS_URI_ENV = "WEIGHTS_URI"
WEIGHTS_DIR_ENV = "WEIGHTS_DIR"
WEIGHTS_PREFIX = "weights/"
WEIGHTS_MANIFEST = "weights.json"
# vLLM's compile caches, saved and restored per model, revision and GPU type: the task role
# reads and writes them with `worker.weights: s3`.
CACHE_PREFIX = "cache/"
# The task's data volume inside the container (on the host's NVMe with `gpu.localStorage`).
DATA_DIR = "/data"
WEIGHTS_DIR = f"{DATA_DIR}/weights"


def weights_prefix(model: str, revision: str) -> str:
    """`weights/<model>/<revision>/`: where one snapshot of a model lives in the bucket."""
    return f"{WEIGHTS_PREFIX}{model}/{revision}/"


def model_variant(model: str) -> str | None:
    """The task type a model's name says its checkpoint serves, as vLLM-Omni reads it; None
    when the name says nothing (a re-export, a local path without a marker)."""
    for component in reversed(re.split(r"[\\/]+", model.rstrip("/\\"))):
        match = _VARIANT.search(component.lower())
        if match is not None:
            return _VARIANTS[re.sub(r"[-_.]", "", match.group(1))]
    return None
