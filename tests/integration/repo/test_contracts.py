"""Each contract fed from its writer to its reader, so a change on one side alone fails here.

- the worker env: written by the task definition, the local fleet and the test helpers, read by
  `worker.settings.load_settings`;
- the S3 layout and the DLQ copy: written by `worker.loop`, read by the client, the local fleet
  and allowed by the task role's IAM policy;
- the EMF metrics: emitted by `worker.metrics` under the task's STACK_NAME, graphed by the
  dashboard under the same `Stack` dimension;
- the stack outputs: exported by `__main__.py`, read by `tts_fleet.client.stack`.

Infrastructure runs under the Pulumi mocks; the worker runs in-process against the emulator.
"""

from __future__ import annotations

import fnmatch
import io
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from rich.console import Console

from tests.lib.procs import env_for, list_keys, make_queues_and_bucket, worker_env
from tests.lib.pulumi_harness import ACCOUNT, REGION, RecordingMocks
from tests.lib.stack_support import PREBUILT, policy, run_main, run_platform, stack_file_config
from tts_fleet.client import stack as client_stack
from tts_fleet.client.aws import Target
from tts_fleet.client.dlq import peek_dead_letters
from tts_fleet.client.results import outcomes, result_objects
from tts_fleet.config import outputs
from tts_fleet.config.models import StackConfig
from tts_fleet.controller.metrics import METRIC_NAMES as CONTROLLER_METRICS
from tts_fleet.controller.metrics import POOL_METRIC_NAMES as CONTROLLER_POOL_METRICS
from tts_fleet.cost.pools import pool_specs
from tts_fleet.local import emulator
from tts_fleet.local.finish import _download
from tts_fleet.local.run import LocalOptions, LocalRun
from worker.consumer import SYSTEM_ATTRIBUTES
from worker.held import HeldMessage
from worker.jobs import (
    FailureRecord,
    Job,
    Manifest,
    PieceQa,
    QaRecord,
    failure_key,
    manifest_key,
)
from worker.loop import Worker
from worker.metrics import (
    AUDIO_SECONDS_PER_SECOND,
    INSTANCE_TYPE_DIMENSION,
    NAMESPACE,
    STACK_DIMENSION,
    Metrics,
)
from worker.protection import Protection
from worker.settings import DEFAULT_ASR_URL, DEFAULT_SPEECH_URL, Settings, load_settings
from worker.speech import Speech

ROOT = Path(__file__).resolve().parents[3]
WORKER_CONFIG = {
    "image": PREBUILT,
    "model": "Qwen/Contract-Model",
    "concurrency": 7,
    "stopTimeoutSeconds": 45,
    "maxTextChars": 4321,
}
QUEUE_CONFIG = {"visibilityTimeoutSeconds": 900}


@pytest.fixture(scope="module")
def platform() -> RecordingMocks:
    return run_platform({"worker": WORKER_CONFIG, "queue": QUEUE_CONFIG})


def _queue_url(mocks: RecordingMocks, suffix: str) -> str:
    [queue] = [q for q in mocks.of_type("aws:sqs/queue:Queue") if q.name.endswith(suffix)]
    return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{queue.name}"


# ---- the worker env -------------------------------------------------------------------


def test_the_task_definitions_env_loads_as_the_values_it_was_given(
    platform: RecordingMocks,
) -> None:
    task = platform.one("aws:ecs/taskDefinition:TaskDefinition").inputs
    [container] = json.loads(task["containerDefinitions"])
    env = {item["name"]: item["value"] for item in container["environment"]}
    settings = load_settings(env)
    bucket = platform.one("aws:s3/bucket:Bucket").name
    written = (
        settings.queue_url,
        settings.dlq_url,
        settings.output_bucket,
        settings.output_prefix,
        settings.aws_region,
        settings.speech_url,
        settings.speech_model,
        settings.concurrency,
        settings.visibility_timeout,
        settings.max_text_chars,
        settings.stop_timeout_seconds,
        settings.stack_name,
    )
    assert written == (
        _queue_url(platform, "-jobs"),
        _queue_url(platform, "-dlq"),
        bucket,
        "",
        REGION,
        DEFAULT_SPEECH_URL,
        "Qwen/Contract-Model",
        7,
        900,
        4321,
        45.0,
        "dev",
    )


def test_the_local_fleets_env_loads_as_the_values_it_was_given(tmp_path: Path) -> None:
    cfg = StackConfig.from_raw({"worker": WORKER_CONFIG})
    options = LocalOptions(out=tmp_path, visibility_timeout=40, stop_timeout=3.5)
    run = LocalRun(options, cfg, [], Console(file=io.StringIO()))
    run.aws = emulator.LocalAws(
        "http://127.0.0.1:1", "https://q.local/jobs", "https://q.local/dlq", "b", None, None
    )
    run.speech_url = "http://127.0.0.1:5555"
    settings = load_settings(run.worker_env())
    written = (
        settings.queue_url,
        settings.dlq_url,
        settings.output_bucket,
        settings.aws_region,
        settings.speech_url,
        settings.speech_model,
        settings.concurrency,
        settings.visibility_timeout,
        settings.max_text_chars,
        settings.stop_timeout_seconds,
        settings.stack_name,
    )
    assert written == (
        "https://q.local/jobs",
        "https://q.local/dlq",
        "b",
        emulator.REGION,
        "http://127.0.0.1:5555",
        "Qwen/Contract-Model",
        7,
        40,
        4321,
        3.5,
        "local",  # no --stack: the Stack dimension says so
    )


def test_the_local_fleets_workers_check_outputs_as_the_stack_says(tmp_path: Path) -> None:
    qa = {"mode": "asr", "retries": 3, "maxWer": 0.1, "onFail": "keep", "asrModel": "org/asr"}
    cfg = StackConfig.from_raw({"worker": {**WORKER_CONFIG, "image": "r/w:1", "qa": qa}})
    run = LocalRun(LocalOptions(out=tmp_path), cfg, [], Console(file=io.StringIO()))
    run.aws = emulator.LocalAws(
        "http://127.0.0.1:1", "https://q.local/jobs", "https://q.local/dlq", "b", None, None
    )
    run.speech_url, run.asr_url = "http://127.0.0.1:5555", "http://127.0.0.1:5556"
    settings = load_settings(run.worker_env())
    assert (
        settings.qa_mode,
        settings.qa_retries,
        settings.qa_max_wer,
        settings.qa_on_fail,
        settings.asr_model,
        settings.asr_url,
    ) == ("asr", 3, 0.1, "keep", "org/asr", "http://127.0.0.1:5556")


def test_the_test_helpers_env_loads_as_the_values_it_was_given() -> None:
    names = {"queue_url": "https://q/jobs", "dlq_url": "https://q/dlq", "bucket": "b"}
    env = worker_env({"AWS_REGION": "eu-west-1"}, SPEECH_URL="http://s:1", **env_for(names))
    settings = load_settings(env)
    assert (settings.queue_url, settings.dlq_url, settings.output_bucket) == (
        "https://q/jobs",
        "https://q/dlq",
        "b",
    )
    assert (settings.aws_region, settings.speech_url) == ("eu-west-1", "http://s:1")


def test_the_test_helpers_refuse_a_variable_the_worker_does_not_read() -> None:
    with pytest.raises(TypeError, match="the worker reads no SPEECH_ULR"):
        worker_env({}, SPEECH_ULR="http://s:1")


# ---- the S3 layout, the records and the DLQ copy ----------------------------------------


class FixedSpeech:
    """The speech server's part: one piece of audio for any job."""

    def synthesize(self, job: Job) -> Speech:
        return Speech(b"RIFF-audio", 24_000, 1.5, 1)


def _run_worker_on(sqs: Any, s3: Any, settings: Settings, bodies: list[str]) -> None:
    """worker.loop's own code path for each message, minus the polling threads."""
    for body in bodies:
        sqs.send_message(QueueUrl=settings.queue_url, MessageBody=body)
    messages = sqs.receive_message(
        QueueUrl=settings.queue_url,
        MaxNumberOfMessages=10,
        MessageSystemAttributeNames=list(SYSTEM_ATTRIBUTES),
        MessageAttributeNames=["All"],
    )["Messages"]
    assert len(messages) == len(bodies)
    metrics = Metrics(io.StringIO())
    worker = Worker(settings, sqs, s3, FixedSpeech(), Protection(""), metrics)
    for message in messages:
        worker.handler(HeldMessage(message), worker.consumer)


@pytest.fixture
def written(aws_env: dict[str, str]) -> dict[str, Any]:
    """What a worker leaves in the bucket and the DLQ for one done and one invalid job."""
    sqs, s3 = boto3.client("sqs"), boto3.client("s3")
    names = make_queues_and_bucket(sqs, s3)
    settings = load_settings(worker_env({"AWS_REGION": REGION}, **env_for(names)))
    done = Job(id="done-1", text="Hello.")
    _run_worker_on(sqs, s3, settings, [done.body(), json.dumps({"id": "bad-1", "txt": "x"})])
    target = Target(names["queue_url"], names["dlq_url"], names["bucket"])
    return {"sqs": sqs, "s3": s3, "target": target, "keys": list_keys(s3, names["bucket"])}


def test_the_worker_writes_only_where_the_task_role_may(
    written: dict[str, Any], platform: RecordingMocks
) -> None:
    [task_policy] = [
        p
        for p in platform.of_type("aws:iam/rolePolicy:RolePolicy")
        if p.name.endswith("-task-policy")
    ]
    [statement] = [s for s in policy(task_policy)["Statement"] if s["Sid"] == "WriteOutputs"]
    patterns = [arn.split("/", 1)[1] for arn in statement["Resource"]]  # "<prefix>*" in bucket
    assert len(written["keys"]) == 3  # audio, manifest, failure record
    for key in written["keys"]:
        assert any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns), (key, patterns)


def test_the_manifest_and_the_failure_record_name_the_sender(written: dict[str, Any]) -> None:
    s3, bucket = written["s3"], written["target"].bucket
    manifest = Manifest.model_validate_json(
        s3.get_object(Bucket=bucket, Key=manifest_key("done-1"))["Body"].read()
    )
    record = FailureRecord.model_validate_json(
        s3.get_object(Bucket=bucket, Key=failure_key("bad-1"))["Body"].read()
    )
    assert manifest.sender_id
    assert record.sender_id == manifest.sender_id


def test_the_clients_readers_find_what_the_worker_wrote(written: dict[str, Any]) -> None:
    s3, target = written["s3"], written["target"]
    done, failed = outcomes(s3, target, ["done-1", "bad-1"])
    assert done == {"done-1"}
    assert list(failed) == ["bad-1"]
    assert failed["bad-1"].startswith("invalid job: ")  # parsed from the FailureRecord
    objects, missing = result_objects(s3, target, ["done-1"])
    assert sorted(item["Key"] for item in objects) == sorted(
        key for key in written["keys"] if "done-1" in key
    )
    assert missing == []


def test_the_dlq_reader_sees_the_workers_reason(written: dict[str, Any]) -> None:
    [letter] = peek_dead_letters(written["sqs"], written["target"].dlq_url)
    assert letter.job_id == "bad-1"
    assert letter.error is not None and letter.error.startswith("invalid job: ")


def test_the_local_fleet_reads_the_workers_manifests(
    written: dict[str, Any], tmp_path: Path
) -> None:
    target = written["target"]
    aws = emulator.LocalAws(
        "", target.queue_url, target.dlq_url, target.bucket, written["sqs"], written["s3"]
    )
    # What finish.collect downloads at the end of a run; it reads only the run's `aws`.
    [manifest], failed_ids = _download(SimpleNamespace(aws=aws), tmp_path)
    assert (manifest.id, manifest.duration_s, failed_ids) == ("done-1", 1.5, {"bad-1"})
    assert manifest.audio_key in written["keys"]


# ---- the metrics ----------------------------------------------------------------------


Series = tuple[str, str, tuple[tuple[str, str], ...]]  # namespace, name, dimensions


def _dashboard_metrics(platform: RecordingMocks) -> set[Series]:
    """The worker series the dashboard graphs: namespace, name and its dimension pairs."""
    body = json.loads(platform.one("aws:cloudwatch/dashboard:Dashboard").inputs["dashboardBody"])
    rows = [row for w in body["widgets"] for row in w["properties"]["metrics"]]
    own = [row for row in rows if isinstance(row[0], str) and "/" not in row[0]]
    # The controller's decisions share the namespace; they are its contract, not the worker's
    # (tests/unit/components/test_observability.py ties those to tts_fleet/controller/metrics.py).
    worker = [row for row in own if row[1] not in (*CONTROLLER_METRICS, *CONTROLLER_POOL_METRICS)]
    return {(row[0], row[1], tuple(zip(row[2:-1:2], row[3:-1:2], strict=True))) for row in worker}


def _emitted_metrics(env: dict[str, str] | None = None) -> set[Series]:
    """What a worker started with the task definition's env writes: `worker.__main__` builds
    Metrics from the loaded settings' stack name."""
    stream = io.StringIO()
    stack = load_settings(env).stack_name if env else "dev"
    metrics = Metrics(stream, stack=stack)
    metrics.completed(1.0, 2.0, 0.5)
    metrics.failed()
    metrics.checked(3, 1, {"runaway": 1})
    metrics.failed_on_quality()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    return {
        (
            group["Namespace"],
            metric["Name"],
            tuple((d, line[d]) for dims in group["Dimensions"] for d in dims),
        )
        for line in lines
        for group in line["_aws"]["CloudWatchMetrics"]
        for metric in group["Metrics"]
    }


def _task_env(platform: RecordingMocks) -> dict[str, str]:
    task = platform.one("aws:ecs/taskDefinition:TaskDefinition").inputs
    [container] = json.loads(task["containerDefinitions"])
    return {item["name"]: item["value"] for item in container["environment"]}


def test_the_dashboard_graphs_exactly_the_metrics_the_worker_emits(
    platform: RecordingMocks,
) -> None:
    # AWS namespaces contain a "/" (AWS/SQS); the worker's own namespace does not.
    emitted = _emitted_metrics(_task_env(platform))
    assert _dashboard_metrics(platform) == emitted
    assert {namespace for namespace, _, _ in emitted} == {NAMESPACE}
    # Every series carries this stack's dimension, and only it.
    assert {dims for _, _, dims in emitted} == {(("Stack", "dev"),)}


def test_two_stacks_workers_write_distinct_series(platform: RecordingMocks) -> None:
    prod = run_platform({"worker": WORKER_CONFIG, "queue": QUEUE_CONFIG}, stack="prod")
    dev_series, prod_series = (_emitted_metrics(_task_env(p)) for p in (platform, prod))
    assert len(dev_series) == len(prod_series) == 8
    assert dev_series.isdisjoint(prod_series)
    assert _dashboard_metrics(prod) == prod_series  # prod's dashboard: prod's series only


def test_no_component_restates_a_worker_metric_name() -> None:
    names = {name for _, name, _ in _emitted_metrics()} | {NAMESPACE, STACK_DIMENSION}
    alternatives = "|".join(map(re.escape, sorted(names)))
    quoted = re.compile(rf"""["']({alternatives})["']""")
    found = [
        f"{path.name}: {match.group(1)}"
        for path in sorted((ROOT / "components").glob("*.py"))
        for match in quoted.finditer(path.read_text())
    ]
    assert found == []


# ---- the stack outputs ----------------------------------------------------------------


# Not the default, so a reader falling back to it cannot pass for one that read the output.
EXPORTED_TEXT_LIMIT = 4321


@pytest.fixture(scope="module")
def exports() -> dict[str, Any]:
    worker = {"tts-fleet:worker": {"maxTextChars": EXPORTED_TEXT_LIMIT}}
    return run_main({**stack_file_config("dev"), **worker}, "dev")[1]


def test_main_exports_every_declared_output(exports: dict[str, Any]) -> None:
    assert sorted(exports) == sorted(outputs.ALL)


def test_the_client_reads_the_outputs_main_exports(
    exports: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert set(client_stack.READ_OUTPUTS) <= set(exports)
    for name in ("TTS_FLEET_QUEUE_URL", "TTS_FLEET_DLQ_URL", "TTS_FLEET_BUCKET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(client_stack, "stack_outputs", lambda stack: exports)
    target = client_stack.resolve_target("dev", None, None, None)
    resolved = (
        target.queue_url,
        target.dlq_url,
        target.bucket,
        target.cluster,
        target.service,
        target.controller_arn,
        target.max_text_chars,
    )
    assert resolved == (
        exports[outputs.QUEUE_URL],
        exports[outputs.DLQ_URL],
        exports[outputs.BUCKET_NAME],
        exports[outputs.CLUSTER_NAME],
        exports[outputs.SERVICE_NAME],
        exports[outputs.CONTROLLER_FUNCTION_ARN],
        EXPORTED_TEXT_LIMIT,
    )
    assert None not in resolved


# ---- the model snapshot (`worker.weights: s3`) ------------------------------------------
# Written by `tts-fleet weights upload` (tts_fleet/client/weights.py), located for the task by
# WEIGHTS_URI on its task definition, allowed by its task role's policy, read and checked by
# `python -m worker.weights fetch`.


def test_the_task_fetches_the_uploaded_snapshot_from_where_its_role_may_read(
    aws_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.lib.weights_snapshot import files_in, make_snapshot
    from tts_fleet.client.weights import snapshot_files, upload_snapshot
    from worker.weights.__main__ import main as fetch_main

    revision = "ab" * 20
    mocks = run_platform({"worker": {**WORKER_CONFIG, "weights": "s3", "modelRevision": revision}})
    env = _task_env(mocks)
    [task_policy] = [
        r for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("-task-policy")
    ]
    readable = [
        str(arn).removeprefix("arn:aws:s3:::")
        for s in policy(task_policy)["Statement"]
        if "s3:GetObject" in _listed(s["Action"])
        for arn in _listed(s["Resource"])
    ]
    bucket = mocks.one("aws:s3/bucket:Bucket").name
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    contents = make_snapshot(tmp_path / "snapshot", {"config.json": 40, "a/b.safetensors": 5000})
    upload_snapshot(
        s3, bucket, "Qwen/Contract-Model", revision, snapshot_files(tmp_path / "snapshot")
    )

    assert fetch_main(["fetch", env["WEIGHTS_URI"], str(tmp_path / "dest")], env={}) == 0
    assert files_in(tmp_path / "dest") == contents
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    for key in keys:  # every object the fetch reads, the task role may read
        assert any(fnmatch.fnmatchcase(f"{bucket}/{key}", p) for p in readable), (key, readable)
    assert env["WEIGHTS_DIR"].startswith("/data/")
    capsys.readouterr()


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# ---- the output checks (issue 21) ------------------------------------------------------


def test_the_task_definitions_qa_env_loads_as_the_stacks_worker_qa() -> None:
    qa = {"mode": "asr", "retries": 3, "maxWer": 0.07, "onFail": "keep", "asrModel": "org/asr"}
    mocks = run_platform({"worker": {**WORKER_CONFIG, "qa": qa}, "queue": QUEUE_CONFIG})
    settings = load_settings(_task_env(mocks))
    config = StackConfig.from_raw({"worker": {**WORKER_CONFIG, "qa": qa}}).worker.qa
    assert (
        settings.qa_mode,
        settings.qa_retries,
        settings.qa_max_wer,
        settings.qa_on_fail,
        settings.asr_model,
    ) == (config.mode, config.retries, config.max_wer, config.on_fail, config.asr_model)
    assert settings.asr_url == DEFAULT_ASR_URL


def test_the_worker_qa_defaults_are_the_workers_own() -> None:
    config = StackConfig().worker.qa
    default = Settings(queue_url="https://q", dlq_url="https://d", output_bucket="b")
    assert (config.mode, config.retries, config.max_wer, config.on_fail, config.asr_model) == (
        default.qa_mode,
        default.qa_retries,
        default.qa_max_wer,
        default.qa_on_fail,
        default.asr_model,
    )


def test_the_qa_metrics_carry_the_stacks_dimension(platform: RecordingMocks) -> None:
    stream = io.StringIO()
    metrics = Metrics(stream, stack=load_settings(_task_env(platform)).stack_name)
    metrics.checked(3, 1, {"runaway": 1})
    metrics.failed_on_quality()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    series = {
        (
            group["Namespace"],
            metric["Name"],
            tuple(line[d] for dims in group["Dimensions"] for d in dims),
        )
        for line in lines
        for group in line["_aws"]["CloudWatchMetrics"]
        for metric in group["Metrics"]
    }
    assert series == {
        (NAMESPACE, "PiecesChecked", ("dev",)),
        (NAMESPACE, "PiecesRejected", ("dev",)),
        (NAMESPACE, "JobsFailed", ("dev",)),
        (NAMESPACE, "JobsFailedOnQuality", ("dev",)),
    }


def test_the_manifest_and_the_failure_record_carry_the_qa_report() -> None:
    # The worker writes these models (worker/jobs.py); readers parse them back whole.
    piece = PieceQa(
        characters=12, seconds=1.2, expected_seconds=0.8, longest_silence_s=0.1, wer=0.0,
        attempts=2, seeds=[1, 2], passed=True,
    )  # fmt: skip
    qa = QaRecord(mode="asr", passed=True, rerenders=1, pieces=[piece])
    record = FailureRecord(
        id="x", error="quality", detail="piece 1", attempts=1, message_id="m", worker="w",
        failed_at="2026-01-01T00:00:00.000+00:00", qa=qa,
    )  # fmt: skip
    assert FailureRecord.model_validate_json(record.to_json()).qa == qa
    assert record.reason().startswith("quality: ")
    body = json.loads(record.to_json())
    assert set(body["qa"]) == {"mode", "passed", "rerenders", "reason", "pieces"}
    assert set(body["qa"]["pieces"][0]) == {
        "characters", "seconds", "expected_seconds", "longest_silence_s", "wer", "attempts",
        "seeds", "passed", "failed", "excerpt",
    }  # fmt: skip


def test_the_book_records_prefix_is_the_one_the_policies_allow() -> None:
    """`submit BOOK.epub` writes, and `results --book` reads, under the prefix the producer
    and reader policies name (components may not import tts_fleet.client)."""
    from components.storage import BOOKS_PREFIX as POLICY_PREFIX
    from tts_fleet.client.book_record import BOOKS_PREFIX, cover_key, record_key

    assert POLICY_PREFIX == BOOKS_PREFIX
    assert record_key("b", "p/").startswith(f"p/{POLICY_PREFIX}")
    assert cover_key("b", "png", "p/").startswith(f"p/{POLICY_PREFIX}")


# ---- measured throughput (issue #23) ----------------------------------------------------


def test_the_task_env_prices_each_capacity_type_from_the_stacks_priced_pools() -> None:
    gpu = {
        "pools": [
            {"name": "spot", "capacityType": "spot"},
            {"name": "od", "capacityType": "on-demand"},
        ]
    }
    raw = {**stack_file_config("dev"), "tts-fleet:gpu": gpu}
    mocks, _ = run_main(raw, "dev")
    cfg = StackConfig.from_raw({"gpu": gpu, "scaling": raw["tts-fleet:scaling"]})
    priced = {pool.capacity_type: pool.usd_per_hour for pool in pool_specs(cfg, REGION)}
    assert set(priced) == {"spot", "on-demand"}
    assert dict(load_settings(_task_env(mocks)).pool_usd_per_hour) == priced


def test_the_manifest_and_the_rate_line_carry_the_measured_throughput(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's writer (worker.loop in process) and the manifest's reader agree on
    instance_type, audio_s_per_s and cost_usd; the rate goes out per Stack and InstanceType."""
    monkeypatch.setenv("INSTANCE_TYPE", "g6e.xlarge")
    monkeypatch.setenv("INSTANCE_LIFE_CYCLE", "spot")
    sqs, s3 = boto3.client("sqs"), boto3.client("s3")
    names = make_queues_and_bucket(sqs, s3)
    prices = json.dumps({"spot": 0.9, "on-demand": 1.8})
    env = worker_env({"AWS_REGION": REGION, "STACK_NAME": "dev"}, **env_for(names))
    settings = load_settings({**env, "POOL_USD_PER_HOUR": prices})
    sqs.send_message(QueueUrl=settings.queue_url, MessageBody=Job(id="t-1", text="Hi.").body())
    [message] = sqs.receive_message(
        QueueUrl=settings.queue_url, MessageSystemAttributeNames=list(SYSTEM_ATTRIBUTES)
    )["Messages"]
    stream = io.StringIO()
    worker = Worker(settings, sqs, s3, FixedSpeech(), Protection(""), Metrics(stream, "dev"))
    worker.handler(HeldMessage(message), worker.consumer)
    body = s3.get_object(Bucket=names["bucket"], Key=manifest_key("t-1"))["Body"].read()
    manifest = Manifest.model_validate_json(body)
    assert manifest.instance_type == "g6e.xlarge"
    assert manifest.audio_s_per_s is not None and manifest.audio_s_per_s > 0
    # The Spot price's share of the hour for 1.5 s of audio at the measured rate.
    expected = 0.9 / 3600 * manifest.duration_s / manifest.audio_s_per_s  # type: ignore[operator]
    assert manifest.cost_usd == pytest.approx(expected, rel=1e-3)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    [rate] = [line for line in lines if AUDIO_SECONDS_PER_SECOND in line]
    dimensions = rate["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
    assert dimensions == [[STACK_DIMENSION, INSTANCE_TYPE_DIMENSION]]
    assert (rate[STACK_DIMENSION], rate[INSTANCE_TYPE_DIMENSION]) == ("dev", "g6e.xlarge")
    assert rate[AUDIO_SECONDS_PER_SECOND] == pytest.approx(manifest.audio_s_per_s, abs=1e-3)


# ---- deadline batches (issue #23) ---------------------------------------------------------
# The record: written by `submit` (tts_fleet/client/batches.py), read by the controller
# (tts_fleet/controller/batches.py); the message attribute: set by the client's sender, read
# by the controller's progress estimate only (the worker's job body is unchanged); the
# forecasts: written by the controller, read by `status`; the stack key: scaling.deadlineMinutes
# exported by `__main__.py`, read by `tts_fleet.client.stack`.


def test_the_record_submit_writes_is_the_one_the_controller_reads(in_process_aws: None) -> None:
    from moto import mock_aws

    from tts_fleet.client.batches import new_batch, read_open_batches, write_batch
    from tts_fleet.controller import batches as controller_batches
    from tts_fleet.scaling.batches import BatchForecast
    from worker.jobs import Job

    jobs = [Job(text=f"line {n}.") for n in range(3)]
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="outputs")
        now = 1_796_173_200.0
        record = new_batch(now, now + 3600, {job.job_id: job.digest() for job in jobs})
        write_batch(s3, "outputs", record)
        book, problems = controller_batches.load(s3, "outputs", "dev")
        assert problems == [] and book.records == [record]
        forecast = BatchForecast(record.batch_id, record.deadline, now + 60, at_risk=False)
        book.sample(now=now, outstanding=2, forecasts=[forecast], first=True)
        book.finish(s3, "outputs", now)
        [shown] = read_open_batches(s3, "outputs").to_json()
    assert (shown["batch_id"], shown["jobs"], shown["done"]) == (record.batch_id, 3, 1)


def test_the_batch_attribute_leaves_the_job_body_the_workers(in_process_aws: None) -> None:
    from moto import mock_aws

    from tts_fleet.client.submit import submit_jobs
    from tts_fleet.scaling.batches import BATCH_ATTRIBUTE
    from worker.jobs import Job, validate_job

    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
        submit_jobs(sqs, url, [Job(text="Hello.")], batch_id="b-20261202T010000Z-0123abcd")
        [message] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert message["MessageAttributes"] == {
        BATCH_ATTRIBUTE: {"StringValue": "b-20261202T010000Z-0123abcd", "DataType": "String"}
    }
    assert validate_job(json.loads(message["Body"]), max_text_chars=100).text == "Hello."


def test_the_stack_default_deadline_reaches_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    scaling = {"tts-fleet:scaling": {"deadlineMinutes": 45}}
    exported = run_main({**stack_file_config("dev"), **scaling}, "dev")[1]
    assert exported[outputs.DEADLINE_MINUTES] == 45
    monkeypatch.setattr(client_stack, "stack_outputs", lambda stack: exported)
    assert client_stack.resolve_target("dev", None, None, None).deadline_minutes == 45


def test_the_controller_role_may_touch_the_batch_keys_it_uses(platform: RecordingMocks) -> None:
    from tts_fleet.scaling.batches import FORECASTS_KEY, record_key

    [role_policy] = [
        p
        for p in platform.of_type("aws:iam/rolePolicy:RolePolicy")
        if p.name.endswith("-controller-policy")
    ]
    statements = {s["Sid"]: s for s in policy(role_policy)["Statement"]}
    # The bucket ARN, then a key pattern: the client's record key matches it.
    pattern = statements["ReadBatches"]["Resource"].split("/", 1)[1]
    assert fnmatch.fnmatch(record_key("b-20261202T010000Z-0123abcd"), pattern)
    assert statements["KeepForecasts"]["Resource"].endswith(f"/{FORECASTS_KEY}")


# ---- voices (issue 25) ---------------------------------------------------------------------


@pytest.mark.parametrize("task_type", ["Base", "VoiceDesign"])
def test_the_task_definitions_task_type_is_the_stacks(task_type: str) -> None:
    # A model whose name says no task type, so any worker.taskType goes with it.
    worker = {**WORKER_CONFIG, "taskType": task_type}
    settings = load_settings(_task_env(run_platform({"worker": worker, "queue": QUEUE_CONFIG})))
    assert settings.speech_task_type == task_type
    assert StackConfig.from_raw({"worker": worker}).worker.task_type == task_type
