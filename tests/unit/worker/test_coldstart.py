"""The cold-start phase computation (worker/coldstart.py), the ColdStartSeconds line
(worker/metrics.py) and the talker's stage overrides (worker/vllm_args.py), in process."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.lib.ecs_stand_in import TASK_ARN, agent_time, task_metadata
from worker.coldstart import (
    PHASES,
    ColdStart,
    TaskTimes,
    first_job_phases,
    parse_time,
    read_marks,
    startup_phases,
    task_times,
)
from worker.metrics import ColdStartMetrics, Metrics
from worker.vllm_args import capture_sizes, main, stage_overrides

T0 = 1_764_636_000.0  # 2025-12-02T00:40:00Z


def test_agent_timestamps_with_nanoseconds_are_read() -> None:
    assert parse_time("2025-12-02T00:40:00.250000000Z") == T0 + 0.25
    assert parse_time("2025-12-02T00:40:00Z") == T0
    assert parse_time("2025-12-02T01:40:00.5+01:00") == T0 + 0.5
    with pytest.raises(ValueError, match="not an ISO 8601"):
        parse_time("yesterday")


def test_task_times_come_from_the_v4_task_answer() -> None:
    metadata = task_metadata(T0 + 60, T0 + 102.25, T0 + 104.5)
    assert agent_time(T0 + 60) == "2025-12-02T00:41:00.000000000Z"
    assert task_times(metadata, created=T0) == TaskTimes(T0, T0 + 60, T0 + 102.25, T0 + 104.5)
    # A container not yet started (no StartedAt) and a malformed stamp are not boundaries.
    metadata["Containers"].append({"Name": "sidecar"})
    metadata["PullStoppedAt"] = "later"
    assert task_times(metadata) == TaskTimes(None, T0 + 60, None, T0 + 104.5)
    assert metadata["TaskARN"] == TASK_ARN


def test_marks_read_the_last_of_each_name_and_skip_what_is_not_a_mark(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.write_text("weights-start 10.5\nnonsense\nweights-end x\nweights-end 12.0\n")
    assert read_marks(marks) == {"weights-start": 10.5, "weights-end": 12.0}
    assert read_marks(tmp_path / "absent") == {}
    assert read_marks(None) == {}


MARKS = {
    "weights-start": T0 + 105.0,
    "weights-end": T0 + 117.5,
    "cache-start": T0 + 117.5,
    "cache-end": T0 + 119.0,
    "server-start": T0 + 119.0,
    "server-healthy": T0 + 151.0,
}
TIMES = TaskTimes(T0, T0 + 60, T0 + 102.25, T0 + 104.5)


def test_startup_phases_from_ecs_the_entrypoint_and_the_canary() -> None:
    phases = startup_phases(TIMES, MARKS, (T0 + 152.0, T0 + 153.25))
    assert phases == {
        "provision": 104.5,
        "pull": 42.25,
        "weights": 12.5,
        "cache": 1.5,
        "server": 32.0,
        "canary": 1.25,
    }


def test_an_unknown_boundary_leaves_its_phase_out_rather_than_guess() -> None:
    # Outside ECS, baked weights (no weights marks), a clock step backwards on the server.
    marks = {"server-start": T0 + 20, "server-healthy": T0 + 10}
    assert startup_phases(TaskTimes(), marks, None) == {}
    no_create = TaskTimes(None, T0 + 60, T0 + 102.25, T0 + 104.5)
    assert startup_phases(no_create, {}, (T0 + 1, T0 + 2)) == {"pull": 42.25, "canary": 1.0}


def test_first_job_and_total_count_from_the_earliest_known_start() -> None:
    assert first_job_phases(TIMES, T0 + 153.25, T0 + 160.0) == {
        "first-job": 6.75,
        "total": 160.0,
    }
    no_create = TaskTimes(None, T0 + 60, None, T0 + 104.5)
    assert first_job_phases(no_create, None, T0 + 160.0) == {"total": 100.0}
    container_only = TaskTimes(container_started=T0 + 104.5)
    assert first_job_phases(container_only, T0 + 150, T0 + 160.0) == {
        "first-job": 10.0,
        "total": 55.5,
    }


def test_the_record_emits_each_phase_once_whatever_the_order_things_arrive_in() -> None:
    emitted: list[tuple[str, float, str]] = []
    now = [T0 + 160.0]
    record = ColdStart(lambda *line: emitted.append(line), clock=lambda: now[0])
    record.ready(T0 + 152.0, T0 + 153.25)  # before the context: nothing known yet
    record.job_done()
    assert emitted == []
    record.known(TIMES, MARKS, "g6.xlarge")
    now[0] = T0 + 999.0
    record.job_done()  # a second job changes nothing
    record.known(TIMES, MARKS, "g6.xlarge")  # nor does the context again
    assert [phase for phase, _, _ in emitted] == list(PHASES)
    assert {phase: s for phase, s, _ in emitted}["total"] == 160.0
    assert {kind for _, _, kind in emitted} == {"g6.xlarge"}


def test_the_cold_start_line_carries_stack_phase_and_instance_type() -> None:
    stream = io.StringIO()
    ColdStartMetrics(Metrics(stream, stack="prod")).emit("pull", 42.25, "g6e.xlarge")
    line = json.loads(stream.getvalue())
    assert line["_aws"]["CloudWatchMetrics"] == [
        {
            "Namespace": "TtsFleet",
            "Dimensions": [["Stack", "Phase", "InstanceType"]],
            "Metrics": [{"Name": "ColdStartSeconds", "Unit": "Seconds"}],
        }
    ]
    assert (line["Stack"], line["Phase"], line["InstanceType"]) == ("prod", "pull", "g6e.xlarge")
    assert line["ColdStartSeconds"] == 42.25


@pytest.mark.parametrize(
    ("concurrency", "sizes"),
    [(1, [1]), (2, [1, 2]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]), (64, [1, 2, 4, 8, 16, 32, 64])],
)
def test_talker_graph_sizes_stop_at_the_worker_s_concurrency(
    concurrency: int, sizes: list[int]
) -> None:
    assert capture_sizes(concurrency) == sizes
    assert stage_overrides(concurrency) == {
        "0": {
            "max_num_seqs": concurrency,
            "compilation_config": {"cudagraph_capture_sizes": sizes},
        },
        "1": {"max_num_seqs": concurrency},
    }


def test_a_bad_concurrency_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main({"CONCURRENCY": "lots"}) == 2
    assert capsys.readouterr().err == "CONCURRENCY='lots' must be an integer >= 1\n"
    assert main({}) == 0
    assert json.loads(capsys.readouterr().out)["0"]["max_num_seqs"] == 4
