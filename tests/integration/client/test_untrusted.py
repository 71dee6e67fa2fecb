"""The bucket and the queues are untrusted input (issue 20): keys planted under outputs/ never
make `results` (or `--join`) write outside OUT, a receipt's ids are checked, a failure record
without a digest fails no waiter that knows its digest, and text from a queue or a server
reaches the terminal escaped. Planted through the emulator, run through the real CLI."""

from __future__ import annotations

import io
import json
import wave
from pathlib import Path

import boto3
import pytest
from rich.console import Console

from tests.lib.client_stack import Stack, finish, run, run_json
from tts_fleet.cli.status import status_table
from tts_fleet.client.books import join_parts
from tts_fleet.client.keys import audio_format, inside
from worker.jobs import (
    DLQ_ERROR_ATTRIBUTE,
    FailureRecord,
    Job,
    Manifest,
    failure_key,
    manifest_key,
)
from worker.jobs import audio_key as worker_audio_key

# What a producer or a server can put in an id, an attribute or an error: rich markup for a
# link, a raw OSC 8 hyperlink, and a line break to forge a row of its own.
HOSTILE = (
    "[link=https://evil.example]click[/link]"
    "\x1b]8;;https://evil.example\x1b\\here\x1b]8;;\x1b\\"
    "\nforged line"
)


def wav(frames: int = 100) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(24_000)
        audio.writeframes(b"\x01\x00" * frames)
    return buffer.getvalue()


def plant(stack: Stack, key: str, job_id: str, audio_key: str, audio: bytes = b"PWNED") -> None:
    """A manifest at `key` naming `job_id` and `audio_key`, and that audio: what a compromised
    worker (or anyone with s3:PutObject on outputs/*) can leave."""
    s3 = boto3.client("s3")
    s3.put_object(Bucket=stack.bucket, Key=audio_key, Body=audio)
    manifest = Manifest(
        id=job_id, request={"text": "t", "format": "wav"}, audio_key=audio_key, duration_s=1.0,
        sample_rate=24_000, model="m", voice="Vivian", synth_s=0.5, queue_wait_s=0.1,
        attempts=1, pieces=1, worker="w", finished_at="2026-01-01T00:00:00Z",
    )  # fmt: skip
    s3.put_object(Bucket=stack.bucket, Key=key, Body=manifest.to_json())


def tree(root: Path, leave_out: Path) -> dict[str, bytes]:
    """Every file under `root` but those in `leave_out`, with its content."""
    return {
        str(path): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file() and not path.is_relative_to(leave_out)
    }


@pytest.fixture
def planted(stack: Stack, tmp_path: Path) -> dict[str, str]:
    """Two valid jobs, the two parts of a split text, and the review's traversal keys; the
    planted keys -> the file each would have written."""
    for job_id in ("good-1", "good-2"):
        finish(stack, job_id)
    for part in ("book.p001", "book.p002"):
        finish(stack, part, audio=wav())
    home = tmp_path / "home"
    home.mkdir()
    elsewhere = tmp_path / "elsewhere" / "abs"
    keys = {
        "outputs/../../x.json": "outputs/../../x.wav",  # two levels above OUT
        f"outputs/{elsewhere}.json": f"outputs/{elsewhere}.wav",  # an absolute id
        f"outputs/{home}/.json": "outputs/z.bashrc",  # <home>/.bashrc
    }
    for key, audio_key in keys.items():
        plant(stack, key, key[len("outputs/") : -len(".json")], audio_key)
    # Valid names whose manifests are not their own: another id, audio of another job's name.
    plant(stack, manifest_key("liar"), "../../liar", "outputs/liar.wav")
    plant(stack, manifest_key("dotfile"), "dotfile", "outputs/z.bashrc")
    return {**keys, manifest_key("liar"): "", manifest_key("dotfile"): ""}


@pytest.mark.parametrize("join", [False, True], ids=["results", "results --join"])
def test_planted_keys_write_nothing_outside_out_and_are_named(
    stack: Stack, tmp_path: Path, planted: dict[str, str], join: bool
) -> None:
    out = tmp_path / "deep" / "er" / "out"
    before = tree(tmp_path, out)
    args = ["results", "--out", str(out)] + (["--join"] if join else [])
    result = run(*args, "--json")
    assert tree(tmp_path, out) == before  # nothing written, nothing changed around OUT
    assert not (tmp_path / "home" / ".bashrc").exists()
    summary = json.loads(result.stdout)
    assert summary["untrusted"] == len(planted) and result.exit_code == 1
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == len(planted)
    for key in planted:
        assert sum(repr(key) in line for line in warnings) == 1, key
    names = {path.name for path in out.iterdir()}
    expected = {f"{job_id}.{ext}" for job_id in ("good-1", "good-2", "book.p001", "book.p002")
                for ext in ("json", "wav")}  # fmt: skip
    assert expected <= names and summary["downloaded"] == len(expected)
    assert not names & {"dotfile.bashrc", "liar.json", "liar.wav"}
    if join:
        assert summary["joined"] == ["book"] and (out / "book.wav").exists()


def test_a_receipts_ids_that_are_no_job_ids_are_skipped_with_a_warning(
    stack: Stack, tmp_path: Path
) -> None:
    finish(stack, "good-1")
    receipt = tmp_path / "receipt.json"
    receipt.write_text(json.dumps({"ids": ["good-1", "../../r", "trailing\n"]}))
    result = run("results", str(receipt), "--out", str(tmp_path / "out"), "--json")
    summary = json.loads(result.stdout)
    assert summary["downloaded"] == 2 and summary["untrusted"] == 2 and result.exit_code == 1
    assert "'../../r'" in result.stderr and "'trailing\\n'" in result.stderr
    waited = run("wait", str(receipt), "--timeout", "5", "--interval", "0.1", "--json")
    assert json.loads(waited.stdout) | {"elapsed_s": 0} == {
        "total": 1, "done": 1, "failed": {}, "pending": [], "timed_out": False,
        "elapsed_s": 0, "untrusted": 2, "checks_failed": {}, "batches": None,
    }  # fmt: skip
    assert waited.exit_code == 1 and "'../../r'" in waited.stderr


def digestless_failure(stack: Stack, job_id: str, detail: str = "text is blank") -> None:
    """What any producer gets written for any id: an unreadable body carrying a valid id."""
    record = FailureRecord(
        id=job_id, error="invalid job", detail=detail, attempts=1, message_id="m",
        worker="w", failed_at="2026-01-01T00:00:00Z",
    )  # fmt: skip
    boto3.client("s3").put_object(
        Bucket=stack.bucket, Key=failure_key(job_id), Body=record.to_json()
    )


def test_a_failure_record_without_a_digest_fails_no_waiter_that_knows_it(
    stack: Stack, tmp_path: Path
) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text(json.dumps({"id": "mine", "text": "t"}) + "\n")
    digestless_failure(stack, "mine")
    code, waited = run_json("wait", str(source), "--timeout", "0.5", "--interval", "0.1")
    assert code == 4 and waited["pending"] == ["mine"] and waited["failed"] == {}
    by_hand = tmp_path / "ids.json"  # a receipt without digests: any record of the id counts
    by_hand.write_text(json.dumps({"ids": ["mine"]}))
    code, waited = run_json("wait", str(by_hand), "--timeout", "5", "--interval", "0.1")
    assert code == 1 and waited["failed"] == {"mine": "invalid job: text is blank"}


def test_wait_shows_a_servers_reason_escaped_on_one_line(stack: Stack, tmp_path: Path) -> None:
    source = tmp_path / "jobs.jsonl"
    source.write_text(json.dumps({"id": "w1", "text": "t"}) + "\n")
    record = FailureRecord(
        id="w1", error="rejected by the speech server", detail=HOSTILE, attempts=1,
        message_id="m", worker="w", failed_at="2026-01-01T00:00:00Z",
        request_digest=Job(id="w1", text="t").digest(),
    )  # fmt: skip
    boto3.client("s3").put_object(Bucket=stack.bucket, Key=failure_key("w1"), Body=record.to_json())
    text = run("wait", str(source), "--interval", "0.1").stdout
    (line,) = [line for line in text.splitlines() if line.startswith("failed: w1:")]
    assert "\x1b" not in text and "forged line" in line
    assert "\\[link=https://evil.example]click\\[/link]" in line


def test_dlq_list_escapes_planted_ids_and_shows_the_workers_reason(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "500")  # no wrapping: a forged line would start a line
    sqs = boto3.client("sqs")
    forged = {DLQ_ERROR_ATTRIBUTE: {"DataType": "String", "StringValue": HOSTILE}}
    sqs.send_message(QueueUrl=stack.dlq_url, MessageBody=json.dumps({"id": HOSTILE}),
                     MessageAttributes=forged)  # fmt: skip
    recorded = {DLQ_ERROR_ATTRIBUTE: {"DataType": "String", "StringValue": "all is well"}}
    sqs.send_message(QueueUrl=stack.dlq_url, MessageBody=json.dumps({"id": "real", "text": ""}),
                     MessageAttributes=recorded)  # fmt: skip
    digestless_failure(stack, "real", detail="text: text is blank")
    text = run("dlq", "list").stdout
    assert "\x1b" not in text  # neither the id's raw escapes nor the attribute's
    assert not any(line.lstrip("│┃| ").startswith("forged line") for line in text.splitlines())
    assert "'[link=https://evil.example]click[/link]" in text  # the id as its repr, literally
    assert "(from the message attribute)" in text  # the forged id has no failure record
    (real,) = [line for line in text.splitlines() if " real " in line]
    assert "invalid job: text: text is blank" in real and "all is well" not in real
    letters = run_json("dlq", "list")[1]["messages"]
    assert {m["job_id"]: m["failure"] for m in letters} == {
        HOSTILE: None,
        "real": "invalid job: text: text is blank",
    }


def test_status_cells_from_a_server_are_escaped() -> None:
    snapshot = {"at": "now", "visible": 1, "in_flight": 0, "delayed": 0, "dlq_depth": None,
                "oldest_age_s": None, "ecs": {"desired": HOSTILE, "running": 1}}  # fmt: skip
    rendered = io.StringIO()
    Console(file=rendered, width=500, force_terminal=True).print(status_table(snapshot))
    text = rendered.getvalue()
    # No hyperlink at all: neither the raw OSC 8 nor one rich would make of `[link=…]`.
    assert "]8;" not in text and "[link=https://evil.example]" in text and "forged line" in text


def test_join_refuses_a_manifest_that_names_another_id(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "secret.wav").write_bytes(wav())  # outside OUT: never read into a join
    for part, job_id in (("bk.p001", "bk.p001"), ("bk.p002", "../secret")):
        (out / f"{part}.wav").write_bytes(wav())
        manifest = {"id": job_id, "request": {"format": "wav"}, "duration_s": 0.1}
        (out / f"{part}.json").write_text(json.dumps(manifest))
    report = join_parts(out, ["bk.p001", "bk.p002"])
    assert report.joined == [] and "'../secret'" in report.failed["bk"]
    assert not (out / "bk.wav").exists()


@pytest.mark.parametrize(
    ("job_id", "audio_key", "prefix", "expected"),
    [
        ("a", "outputs/a.wav", "", "wav"),
        ("a", "books/outputs/a.0123456789abcdef.mp3", "books/", "mp3"),  # a re-made job's
        ("a.p001", "outputs/a.p001.flac", "", "flac"),
        ("a", "outputs/a.0123456789ABCDEF.wav", "", None),  # the hash is lower-case hex
        ("a", "outputs/a.0123.wav", "", None),
        ("a", "outputs/a.bashrc", "", None),
        ("a", "outputs/z.wav", "", None),  # another job's
        ("a", "outputs/a.wav", "books/", None),  # another prefix's
        ("a", "outputs/a.wav\n", "", None),
        ("a", "outputs/a/../b.wav", "", None),
    ],
)
def test_the_audio_key_rule_is_the_output_stores(
    job_id: str, audio_key: str, prefix: str, expected: str | None
) -> None:
    manifest = Manifest(
        id=job_id, request={}, audio_key=audio_key, duration_s=None, sample_rate=None,
        model="m", voice="v", synth_s=0, queue_wait_s=0, attempts=1, pieces=1, worker="w",
        finished_at="",
    )  # fmt: skip
    assert audio_format(manifest, job_id, prefix) == expected
    if expected is not None:  # each accepted key is one the worker's own rule makes
        tag = audio_key[len(f"{prefix}outputs/{job_id}") : -len(f".{expected}")]
        assert audio_key == worker_audio_key(job_id, expected, prefix, tag[1:] or None)


def test_a_path_is_inside_only_when_it_resolves_below_the_directory(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path)
    assert inside(tmp_path / "out", "a.wav") == tmp_path / "out" / "a.wav"
    for name in ("../a.wav", "/etc/passwd", "..", ".", "link/a.wav"):
        assert inside(tmp_path / "out", name) is None, name


def test_a_redrive_deletes_failure_records_only_under_job_ids(stack: Stack) -> None:
    """A dead-lettered body's id is its sender's: it names no record to delete unless it is
    a job id."""
    s3, sqs = boto3.client("s3"), boto3.client("sqs")
    for job_id in ("../planted", "real"):
        s3.put_object(Bucket=stack.bucket, Key=failure_key(job_id), Body=b"{}")
        sqs.send_message(
            QueueUrl=stack.dlq_url,
            MessageBody=json.dumps({"id": job_id, "text": "t"}),
            MessageAttributes={DLQ_ERROR_ATTRIBUTE: {"DataType": "String", "StringValue": "x"}},
        )
    code, report = run_json("dlq", "redrive", "--filter", "x")
    assert code == 0 and report["moved"] == 2
    left = s3.list_objects_v2(Bucket=stack.bucket, Prefix="failures/")["Contents"]
    assert [item["Key"] for item in left] == [failure_key("../planted")]
