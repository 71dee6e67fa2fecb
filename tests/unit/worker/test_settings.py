"""Worker configuration: defaults per DESIGN §3.4, one clear line per problem, exit codes."""

from __future__ import annotations

import dataclasses

import pytest

from worker.consumer import backoff_seconds
from worker.settings import Settings, SettingsError, load_settings
from worker.settings import worker_env as settings_env

REQUIRED = {
    "AWS_REGION": "us-east-1",
    "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/jobs",
    "DLQ_URL": "https://sqs.us-east-1.amazonaws.com/1/jobs-dlq",
    "OUTPUT_BUCKET": "out",
}


def test_defaults_follow_the_design() -> None:
    settings = load_settings({**REQUIRED, "WORKER_ID": "w"})
    assert settings == Settings(**{k.lower(): v for k, v in REQUIRED.items()}, worker_id="w")
    assert (
        load_settings({**REQUIRED, "AWS_REGION": "", "AWS_DEFAULT_REGION": "eu-west-1"}).aws_region
        == "eu-west-1"
    )
    assert (settings.output_prefix, settings.speech_url) == ("", "http://127.0.0.1:8091")
    assert (settings.concurrency, settings.visibility_timeout, settings.max_text_chars) == (
        4,
        300,
        20_000,
    )
    assert (settings.stop_timeout_seconds, settings.wait_time_seconds) == (120, 20)
    assert settings.ecs_agent_uri == ""


def test_heartbeat_follows_a_custom_visibility_timeout() -> None:
    settings = load_settings({**REQUIRED, "VISIBILITY_TIMEOUT": "30"})
    assert settings.heartbeat_seconds == 10


@pytest.mark.parametrize("visibility", ["300", "10800", "43200"])
def test_protection_renewal_lands_before_the_expiry(visibility: str) -> None:
    # The renewal timer is not the heartbeat: a 12 h visibility means a 4 h heartbeat.
    settings = load_settings({**REQUIRED, "VISIBILITY_TIMEOUT": visibility})
    assert settings.protection_tick_seconds == min(settings.heartbeat_seconds, 900)
    latest = settings.protection_renew_seconds + settings.protection_tick_seconds
    assert latest < settings.protection_expires_minutes * 60


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"QUEUE_URL": ""}, "QUEUE_URL is required"),
        ({"CONCURRENCY": "four"}, "CONCURRENCY='four': must be an integer"),
        ({"CONCURRENCY": "0"}, "CONCURRENCY='0': must be between 1 and 256"),
        ({"WAIT_TIME_SECONDS": "21"}, "WAIT_TIME_SECONDS='21': must be between 0 and 20"),
        ({"VISIBILITY_TIMEOUT": "50000"}, "'50000': must be between 2 and 43200"),
        (
            {"VISIBILITY_TIMEOUT": "10", "HEARTBEAT_SECONDS": "10"},
            "HEARTBEAT_SECONDS=10 must be shorter than VISIBILITY_TIMEOUT=10",
        ),
        ({"PROTECTION_EXPIRES_MINUTES": "3000"}, "must be between 1 and 2880"),
        ({"DLQ_URL": "jobs-dlq"}, "DLQ_URL='jobs-dlq': must be an SQS queue URL"),
        (
            {"SPEECH_TASK_TYPE": "customvoice"},  # the server's Literal is case-sensitive
            "SPEECH_TASK_TYPE='customvoice': must be one of CustomVoice, VoiceDesign, Base",
        ),
        (  # the stack accepted 2: the drain's 20 % release reserve would be 0.4 s
            {"STOP_TIMEOUT_SECONDS": "2"},
            "STOP_TIMEOUT_SECONDS=2 is shorter than the shortest drain, 2.5s",
        ),
        (  # renewed 3500 s after the last, seen up to a 100 s heartbeat later: past 3600 s
            {"PROTECTION_RENEW_SECONDS": "3500"},
            "PROTECTION_RENEW_SECONDS=3500 plus the renewal check interval 100s must be "
            "shorter than PROTECTION_EXPIRES_MINUTES × 60 = 3600",
        ),
    ],
)
def test_each_problem_is_named(env: dict[str, str], problem: str) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings({**REQUIRED, **env})
    assert problem in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("task_type", ["CustomVoice", "VoiceDesign", "Base"])
def test_the_servers_task_types_are_accepted(task_type: str) -> None:
    assert load_settings({**REQUIRED, "SPEECH_TASK_TYPE": task_type}).speech_task_type == task_type


@pytest.mark.parametrize(
    ("stop", "reserve"), [("2.5", 0.5), ("10", 2.0), ("25", 5.0), ("120", 5.0)]
)
def test_the_stop_budget_keeps_a_release_reserve(stop: str, reserve: float) -> None:
    # The long poll does not count against it (the loop gives up on a poll at the stop):
    # the default 20 s wait goes with any budget the drain can meet.
    settings = load_settings({**REQUIRED, "STOP_TIMEOUT_SECONDS": stop})
    assert settings.release_reserve_seconds == pytest.approx(reserve)
    assert settings.wait_time_seconds == 20


def test_several_problems_on_one_line() -> None:
    with pytest.raises(SettingsError) as error:
        load_settings({"CONCURRENCY": "x"})
    assert str(error.value) == (
        "QUEUE_URL is required; DLQ_URL is required; OUTPUT_BUCKET is required; "
        "CONCURRENCY='x': must be an integer; AWS_REGION is required (the queue's region)"
    )


@pytest.mark.parametrize(
    ("count", "seconds"), [(1, 10), (2, 20), (3, 40), (4, 80), (5, 100), (50, 100)]
)
def test_release_delay_grows_with_the_receive_count(count: int, seconds: int) -> None:
    assert backoff_seconds(count, base=10, cap=100) == seconds


def test_worker_env_writes_what_load_settings_reads() -> None:
    env = settings_env(
        queue_url="https://sqs.eu-west-1.amazonaws.com/1/jobs",
        dlq_url="https://sqs.eu-west-1.amazonaws.com/1/dlq",
        output_bucket="out",
        aws_region="eu-west-1",
        concurrency=3,
        stop_timeout_seconds=2.5,
        prefetch=None,  # None: not written, the worker's default applies
    )
    assert env == {
        "QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/1/jobs",
        "DLQ_URL": "https://sqs.eu-west-1.amazonaws.com/1/dlq",
        "OUTPUT_BUCKET": "out",
        "AWS_REGION": "eu-west-1",
        "CONCURRENCY": "3",
        "STOP_TIMEOUT_SECONDS": "2.5",
    }
    settings = load_settings(env)
    assert (settings.concurrency, settings.stop_timeout_seconds) == (3, 2.5)
    assert settings.prefetch is None


def test_worker_env_can_write_every_setting() -> None:
    for field in dataclasses.fields(Settings):
        assert len(settings_env(**{field.name: "1"})) == 1, field.name


def test_worker_env_refuses_what_the_worker_would_not_read() -> None:
    with pytest.raises(TypeError, match="not worker settings: concurency"):
        settings_env(concurency=4)
    with pytest.raises(TypeError, match="boolean"):
        settings_env(concurrency=True)


def test_worker_env_passes_unresolved_values_through() -> None:
    pending = object()  # e.g. a pulumi.Output: resolved later, by its owner
    assert settings_env(queue_url=pending)["QUEUE_URL"] is pending


def test_the_output_checks_settings() -> None:
    default = load_settings(REQUIRED)
    assert (default.qa_mode, default.qa_retries, default.qa_max_wer, default.qa_on_fail) == (
        "basic",
        2,
        0.2,
        "fail",
    )
    assert (default.asr_url, default.asr_model) == (
        "http://127.0.0.1:8092",
        "openai/whisper-large-v3-turbo",
    )
    env = {"QA_MODE": "asr", "QA_RETRIES": "0", "QA_MAX_WER": "0.05", "QA_ON_FAIL": "keep",
           "ASR_URL": "http://asr:9000", "ASR_MODEL": "org/asr"}  # fmt: skip
    settings = load_settings({**REQUIRED, **env})
    assert (settings.qa_mode, settings.qa_retries, settings.qa_max_wer) == ("asr", 0, 0.05)
    assert (settings.qa_on_fail, settings.asr_url, settings.asr_model) == (
        "keep",
        "http://asr:9000",
        "org/asr",
    )
    written = settings_env(
        qa_mode="asr", qa_retries=0, qa_max_wer=0.05, qa_on_fail="keep",
        asr_url="http://asr:9000", asr_model="org/asr",
    )  # fmt: skip
    assert written == env


def test_bad_output_checks_settings_are_named() -> None:
    bad = {"QA_MODE": "full", "QA_RETRIES": "11", "QA_MAX_WER": "2", "QA_ON_FAIL": "drop"}
    with pytest.raises(SettingsError) as error:
        load_settings({**REQUIRED, **bad})
    assert str(error.value) == (
        "QA_MODE='full': must be one of off, basic, asr; "
        "QA_RETRIES='11': must be between 0 and 10; "
        "QA_MAX_WER='2': must be between 0 and 1; "
        "QA_ON_FAIL='drop': must be one of fail, keep"
    )


def test_word_timestamps_are_off_unless_turned_on() -> None:
    assert load_settings(REQUIRED).word_timestamps == "off"
    assert load_settings({**REQUIRED, "WORD_TIMESTAMPS": "on"}).word_timestamps == "on"
    with pytest.raises(SettingsError, match="WORD_TIMESTAMPS='yes': must be one of off, on"):
        load_settings({**REQUIRED, "WORD_TIMESTAMPS": "yes"})
