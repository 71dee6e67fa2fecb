"""worker/throughput.py: the rolling audio-seconds-per-second rate, the host it is keyed by,
the pool price it is costed with, and the handler's use of them (manifest and EMF line)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from worker.metrics import AUDIO_SECONDS_PER_SECOND, Metrics, ThroughputMetrics
from worker.throughput import (
    Host,
    Throughput,
    busy_seconds,
    hourly_price,
    this_host,
)

G6E = Host("g6e.xlarge", "spot")


def test_busy_seconds_is_the_union_of_the_intervals() -> None:
    assert busy_seconds([]) == 0.0
    assert busy_seconds([(0.0, 4.0), (1.0, 3.0), (2.0, 6.0), (10.0, 11.0)]) == 7.0


def test_overlapping_jobs_share_their_wall_seconds() -> None:
    """Four jobs of 4 s each on the GPU together: 4 × 12 s of audio in 4 wall seconds."""
    rate = Throughput({}, lambda: G6E)
    for _ in range(4):
        measured = rate.completed(100.0, 104.0, 12.0)
    assert measured.audio_s_per_s == 12.0
    assert measured.instance_type == "g6e.xlarge"


def test_idle_time_between_jobs_is_not_counted() -> None:
    rate = Throughput({}, lambda: G6E)
    rate.completed(0.0, 2.0, 6.0)
    assert rate.completed(60.0, 62.0, 10.0).audio_s_per_s == 16.0 / 4.0


def test_the_window_forgets_old_jobs() -> None:
    rate = Throughput({}, lambda: G6E, window_s=300.0)
    rate.completed(0.0, 10.0, 10.0)  # 1× real time, long ago
    assert rate.completed(400.0, 401.0, 8.0).audio_s_per_s == 8.0


def test_a_job_without_a_duration_has_no_rate_until_audio_is_measured() -> None:
    rate = Throughput({"spot": 0.44}, lambda: G6E)
    first = rate.completed(0.0, 1.0, None)
    assert (first.audio_s_per_s, first.cost_usd) == (None, None)


def test_a_jobs_cost_is_its_share_of_the_worker_hour_at_the_measured_rate() -> None:
    rate = Throughput({"spot": 0.36, "on-demand": 1.8}, lambda: G6E)
    measured = rate.completed(0.0, 2.0, 20.0)  # 10 audio seconds per second
    # $0.36/h on Spot: $0.0001 per GPU-second; 20 s of audio took 2 GPU-seconds.
    assert measured.cost_usd == pytest.approx(0.0002)


def test_the_host_is_looked_up_once() -> None:
    calls: list[int] = []

    def host() -> Host:
        calls.append(1)
        return G6E

    rate = Throughput({}, host)
    rate.completed(0.0, 1.0, 3.0)
    rate.completed(1.0, 2.0, 3.0)
    assert calls == [1]


@pytest.mark.parametrize(
    ("prices", "life_cycle", "price"),
    [
        ({}, "spot", None),
        ({"on-demand": 0.87}, "spot", 0.87),  # one pool: its price, whatever IMDS says
        ({"on-demand": 0.87, "reserved": 0.87}, "unknown", 0.87),
        ({"on-demand": 0.87, "spot": 0.44}, "spot", 0.44),
        ({"on-demand": 0.87, "spot": 0.44}, "on-demand", 0.87),
        ({"on-demand": 0.87, "spot": 0.44}, "unknown", None),
    ],
)
def test_the_price_is_the_one_pools_or_the_life_cycles(
    prices: dict[str, float], life_cycle: str, price: float | None
) -> None:
    assert hourly_price(prices, life_cycle) == price


def test_outside_ecs_the_host_is_unknown_without_asking_imds() -> None:
    unreachable = {"IMDS_URL": "http://192.0.2.1"}  # TEST-NET: a request would hang
    assert this_host(unreachable) == Host("unknown", "unknown")
    overridden = {"INSTANCE_TYPE": "g6.xlarge", "INSTANCE_LIFE_CYCLE": "spot", **unreachable}
    assert this_host(overridden) == Host("g6.xlarge", "spot")


@pytest.fixture
def imds() -> Iterator[str]:
    """IMDSv2: a token on PUT, then meta-data with that token."""

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            self._answer(b"token")

        def do_GET(self) -> None:
            answers = {
                "/latest/meta-data/instance-type": b"g6e.xlarge",
                "/latest/meta-data/instance-life-cycle": b"spot",
            }
            if self.headers.get("X-aws-ec2-metadata-token") != "token":
                self.send_error(401)
            elif self.path in answers:
                self._answer(answers[self.path])
            else:
                self.send_error(404)

        def _answer(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_in_ecs_the_type_and_life_cycle_come_from_imds(imds: str) -> None:
    env = {"ECS_CONTAINER_METADATA_URI_V4": "http://agent/v4", "IMDS_URL": imds}
    assert this_host(env) == Host("g6e.xlarge", "spot")


def test_the_rate_line_carries_stack_and_instance_type() -> None:
    stream = io.StringIO()
    ThroughputMetrics(Metrics(stream, stack="prod")).emit(13.04567, "g6e.xlarge", job_id="a")
    line = json.loads(stream.getvalue())
    [directive] = line["_aws"]["CloudWatchMetrics"]
    assert directive["Dimensions"] == [["Stack", "InstanceType"]]
    assert directive["Metrics"] == [{"Name": "AudioSecondsPerSecond", "Unit": "None"}]
    assert (line["Stack"], line["InstanceType"], line["job_id"]) == ("prod", "g6e.xlarge", "a")
    assert line[AUDIO_SECONDS_PER_SECOND] == 13.046
