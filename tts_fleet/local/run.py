"""`tts-fleet local`: the whole pipeline on one machine (DESIGN §1, §6).

Real here: the worker processes, the scaling policy's decisions (tts_fleet/scaling/policy.py),
SQS and S3 semantics (moto over HTTP), speech (espeak-ng), the worker's task-protection calls.
Stood in for: the GPU model (the local speech server), what sets the desired count (the local
scaler: the controller's 10-s samples, or the alarms, one tick per CloudWatch minute, as the
stack's `scaling.mode` says) and the ECS control plane (the worker pool and a stand-in agent
endpoint).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from tts_fleet.client.stack import ENV_BUCKET, ENV_DLQ_URL, ENV_QUEUE_URL
from tts_fleet.client.voices import VoiceFile
from tts_fleet.config.models import StackConfig, checkpoint_of
from tts_fleet.config.stack_file import StackFile, with_overrides
from tts_fleet.cost.pools import pool_specs
from tts_fleet.local import emulator as local_aws
from tts_fleet.local import procs
from tts_fleet.local.agent import EcsAgent
from tts_fleet.local.asr import url_from_log as asr_url_from_log
from tts_fleet.local.events import EventLog
from tts_fleet.local.finish import collect
from tts_fleet.local.pool import WorkerPool
from tts_fleet.local.report import Summary
from tts_fleet.local.scaler import LOCAL_METRIC_LAG_S, PoolScaler, Tick
from tts_fleet.local.speech_faults import FaultPlan
from tts_fleet.local.view import LiveView
from tts_fleet.scaling.alarms import PERIOD_S
from tts_fleet.scaling.controller import ControllerParams
from tts_fleet.scaling.physics import Batching
from tts_fleet.scaling.policy import AlarmsPolicy, ControllerPolicy, Policy
from tts_fleet.scaling.pools import PlacementParams, PoolSpec
from tts_fleet.sim.capacity import Capacity, CapacityError, Outage
from worker.jobs import CUSTOM_VOICE_SPEAKERS, OUTPUTS_PREFIX, Job

if TYPE_CHECKING:
    from tts_fleet.client.inputs import LoadedJobs
from worker.settings import worker_env

# The metrics' Stack dimension when the run reads no stack file.
LOCAL_STACK_NAME = "local"
# The stack's visibility (300 s default) is sized for a GPU job; here a SIGKILLed worker's
# message would wait that long to come back. 30 s is the stack's minimum and ample for
# espeak; the worker's heartbeat extends it for anything longer.
LOCAL_VISIBILITY_SECONDS = 30
# How long a stopped worker may drain before SIGKILL (ECS stopTimeout); espeak jobs take
# well under a second, and Ctrl-C should answer within seconds.
LOCAL_STOP_TIMEOUT_SECONDS = 5.0
# Short long polls, so a SIGTERMed worker notices at once (AWS uses 20 s; moto waits on a
# condition variable, so a short poll costs little).
LOCAL_WAIT_TIME_SECONDS = 2
SPEECH_START_TIMEOUT_SECONDS = 60.0
WORKER_HEALTH_TIMEOUT_SECONDS = 60
# Like an ECS service stuck restarting failing tasks: give up and show the log instead.
MAX_CRASHES_WITHOUT_PROGRESS = 5
# Controller mode's timings in wall time, which the policy sees on the fleet's own clock
# (a tick is a minute): an espeak job (a demo sentence takes well under this) and a worker
# process's start (imports and health checks) when no --cold-start-ticks are added.
LOCAL_JOB_WALL_S = 0.5
LOCAL_BOOT_WALL_S = 1.0


@dataclass(frozen=True)
class LocalOptions:
    demo: int | None = None
    input: str | None = None
    stack: str | None = None
    project_dir: Path = Path(".")
    max_workers: int | None = None
    jobs_per_worker: int | None = None
    idle_ticks: int | None = None
    mode: str | None = None  # "controller" | "alarms": overrides scaling.mode
    tick: float = 1.0
    cold_start_ticks: int = 0
    # --capacity-outage: pools that refuse capacity for a while (needs gpu.pools)
    capacity_outages: tuple[Outage, ...] = ()
    backend: str = "espeak"
    speech_latency_ms: float = 0.0
    visibility_timeout: int = LOCAL_VISIBILITY_SECONDS
    stop_timeout: float = LOCAL_STOP_TIMEOUT_SECONDS
    out: Path = Path("out")
    events: Path | None = None
    json_output: bool = False
    keep_running: bool = False
    voice: str | None = None
    language: str | None = None
    split_chars: int | None = None
    # Issue 21: a share of bad pieces from the speech server (speech_faults.py), by this seed.
    faults: str | None = None
    fault_seed: int = 0
    # Issue 25: submit's --lexicon, applied to the input's texts before their digests.
    lexicon: Path | None = None
    # Issue 25: worker.taskType, and `NAME=PATH` voices added to the run's library.
    task_type: str | None = None
    library_voices: tuple[str, ...] = ()


CAPPED = ("minWorkers", "maxWorkers")  # a schedule's bounds, capped by --max-workers


def resolve_config(options: LocalOptions) -> StackConfig:
    """The stack file's config (or the defaults) with the command's scaling overrides."""
    raw = StackFile.of_stack(options.stack, options.project_dir).raw if options.stack else {}
    scaling = {
        "maxWorkers": options.max_workers,
        "jobsPerWorker": options.jobs_per_worker,
        "idleMinutes": options.idle_ticks,
        "mode": options.mode,
    }
    raw = with_overrides(raw, {"scaling": scaling, "worker": _task_override(options)})
    if options.max_workers is not None and isinstance(raw.get("scaling"), dict):
        # A stack's schedules are sized for its GPUs; here --max-workers caps them too, or
        # prod's `maxWorkers: 40` schedule would refuse a laptop's `--max-workers 6`.
        cap = options.max_workers
        raw["scaling"]["schedules"] = _capped(raw["scaling"].get("schedules"), cap)
        gpu = raw.get("gpu")
        if isinstance(gpu, dict) and isinstance(gpu.get("pools"), list):
            gpu["pools"] = _capped(gpu["pools"], cap)  # a pool's bounds sit inside scaling's
    return StackConfig.from_raw(raw)  # ConfigError names each bad key


# Here no image is built or pulled: the stand-in serves any checkpoint by name, so a task
# type's checkpoint needs no pinned revision (worker.modelRevision's rule is for builds).
LOCAL_IMAGE = "tts-fleet-local-stand-in"
# Who added a --library-voice, in its record.
LOCAL_VOICE_ADDER = "tts-fleet local --library-voice"


def _task_override(options: LocalOptions) -> dict[str, str | None]:
    """--task-type: worker.taskType and its checkpoint (served by the stand-in)."""
    if options.task_type is None:
        return {}
    model = checkpoint_of(options.task_type)
    return {"taskType": options.task_type, "model": model, "image": LOCAL_IMAGE}


def _capped(entries: object, cap: int) -> list[object]:
    """Each entry's minWorkers and maxWorkers at most `cap`."""
    return [
        {**e, **{k: min(v, cap) for k, v in e.items() if k in CAPPED and isinstance(v, int)}}
        if isinstance(e, dict)
        else e
        for e in (entries if isinstance(entries, list) else [])
    ]


def local_pools(cfg: StackConfig, options: LocalOptions) -> tuple[PoolSpec, ...]:
    """The stack's capacity pools as worker groups (`gpu.pools`, controller mode), priced as
    the controller orders them; () without them: one group, as before pools existed. Raises
    CapacityError when --capacity-outage names a pool the run does not have."""
    pooled = bool(cfg.gpu.pools) and cfg.scaling.mode == "controller"
    specs = pool_specs(cfg) if pooled else ()
    if options.capacity_outages and not specs:
        raise CapacityError(
            "--capacity-outage needs capacity pools: a stack whose gpu.pools lists them, "
            "in scaling.mode controller"
        )
    Capacity(outages=options.capacity_outages).check({spec.name for spec in specs})
    return specs


def local_placement(cfg: StackConfig) -> PlacementParams:
    """The placement's timings as the stack sets them, on the fleet's clock (a tick is a
    minute, so the 300-s default provisioning timeout is 5 ticks)."""
    return PlacementParams(
        provisioning_timeout_s=float(cfg.gpu.provisioning_timeout_seconds),
        cooldown_s=float(cfg.gpu.pool_cooldown_seconds),
    )


@dataclass
class Stopper:
    """Set by SIGINT/SIGTERM/SIGHUP: the first asks for a drain, a second for no waiting.
    SIGHUP is a closed terminal: the run must still save what finished and what did not."""

    stop: threading.Event = field(default_factory=threading.Event)
    hurry: threading.Event = field(default_factory=threading.Event)

    def __call__(self, signum: int, frame: object) -> None:
        if self.stop.is_set():
            self.hurry.set()
        self.stop.set()


@contextmanager
def signals_to(stopper: Stopper) -> Iterator[None]:
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, stopper) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class LocalRun:
    """One run: services up, jobs in, scaler ticking until settled or stopped, outputs out."""

    def __init__(
        self, options: LocalOptions, cfg: StackConfig, jobs: list[Job], console: Console
    ) -> None:
        self.options = options
        self.cfg = cfg
        self.jobs = jobs
        self.console = console
        self.stopper = Stopper()
        self.events = EventLog(options.events)
        self.samples: list[Tick] = []
        self.interrupted = False
        self.submitted: list[str] = []
        self.submitted_at = time.time()
        self.log_dir = options.out / "logs"
        self._crashes_seen = 0
        self._fetched: set[str] = set()  # output keys already in --out
        # The speech server's ASR stand-in once it runs (None: the worker's default ASR_URL).
        self.asr_url: str | None = None

    @property
    def out_dir(self) -> Path:
        return self.options.out

    def execute(self, on_ready: Callable[[LocalRun], None]) -> Summary:
        with signals_to(self.stopper), ExitStack() as stack:
            stack.callback(self.events.close)
            self._start_services(stack)
            on_ready(self)
            if not self.stopper.stop.is_set():
                self._submit()
                self._loop()
            self.interrupted = self.stopper.stop.is_set()
            self.pool.shutdown(self.stopper.hurry.is_set)
            return collect(self)

    def _start_services(self, stack: ExitStack) -> None:
        emulator = local_aws.Emulator()
        endpoint = emulator.start()
        stack.callback(emulator.stop)
        self.aws = local_aws.create_resources(endpoint, self.cfg, self.options.visibility_timeout)
        self.events.write("emulator_started", endpoint=endpoint, queue_url=self.aws.queue_url)
        for spec in self.options.library_voices:  # checked by jobs_for before the run
            VoiceFile.parse(spec).add(self.aws.s3, self.aws.bucket, "", LOCAL_VOICE_ADDER)
        self.agent = EcsAgent()
        self.agent.start()
        stack.callback(self.agent.stop)
        speech, url = procs.start_speech_server(
            self.options.backend,
            self.options.speech_latency_ms,
            self.base_env(),
            self.log_dir / "speech-server.log",
            SPEECH_START_TIMEOUT_SECONDS,
            self.stopper.stop.is_set,
            extra_args=(*self.fault_args(), "--model", self.cfg.worker.model),
        )
        stack.callback(procs.stop, speech, 3.0)
        self.speech = speech
        self.speech_url = url
        # The ASR stand-in the same process serves, for QA_MODE=asr.
        self.asr_url = asr_url_from_log(self.log_dir / "speech-server.log", speech)
        self.events.write("speech_server_started", pid=speech.pid, url=url)
        self.pool = WorkerPool(
            self.worker_env(), self.agent, self.log_dir, self.options.stop_timeout, self.events
        )
        stack.callback(self.pool.shutdown, lambda: True)  # on an error: no drain, no orphans
        self.scaler = self._scaler()

    @property
    def fault_plan(self) -> FaultPlan | None:
        """The speech server's fault plan, for the summary to tell caught faults apart."""
        if not self.options.faults:
            return None
        return FaultPlan.parse(self.options.faults, self.options.fault_seed)

    def fault_args(self) -> tuple[str, ...]:
        """The speech server's --faults and --fault-seed (none: every piece clean)."""
        if not self.options.faults:
            return ()
        return ("--faults", self.options.faults, "--fault-seed", str(self.options.fault_seed))

    def _scaler(self) -> PoolScaler:
        """The stack's `scaling.mode` on the fleet's clock: the alarms or the controller."""
        counts = functools.partial(local_aws.fleet_counts, self.aws)
        pools = local_pools(self.cfg, self.options)
        policy: Policy
        if self.cfg.scaling.mode == "alarms":
            policy = AlarmsPolicy(self.cfg.scaling, lag_s=LOCAL_METRIC_LAG_S)
        else:
            params = local_controller_params(self.cfg, self.options)
            placement = local_placement(self.cfg) if pools else None
            policy = ControllerPolicy(params, pools=pools, placement=placement)
        ticks = self.options.cold_start_ticks
        capacity = Capacity(outages=self.options.capacity_outages)
        return PoolScaler(
            policy, self.pool, counts, self._completed, self.events, ticks, pools, capacity
        )

    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def worker_env(self) -> dict[str, str]:
        """DESIGN §3.4, pointed at the emulator, the speech server and local timings."""
        worker = self.cfg.worker
        contract = worker_env(
            queue_url=self.aws.queue_url,
            dlq_url=self.aws.dlq_url,
            output_bucket=self.aws.bucket,
            output_prefix="",
            aws_region=local_aws.REGION,
            speech_url=self.speech_url,
            speech_model=worker.model,
            speech_task_type=worker.task_type,
            asr_url=self.asr_url,
            # The stack's output checks, as its task definition writes them
            # (components/service.py); the ASR stand-in answers any model name.
            qa_mode=worker.qa.mode,
            qa_retries=worker.qa.retries,
            qa_max_wer=worker.qa.max_wer,
            qa_on_fail=worker.qa.on_fail,
            asr_model=worker.qa.asr_model,
            concurrency=worker.concurrency,
            visibility_timeout=self.options.visibility_timeout,
            max_text_chars=worker.max_text_chars,
            wait_time_seconds=LOCAL_WAIT_TIME_SECONDS,
            stop_timeout_seconds=self.options.stop_timeout,
            health_timeout_seconds=WORKER_HEALTH_TIMEOUT_SECONDS,
            stack_name=self.options.stack or LOCAL_STACK_NAME,  # the metrics' Stack dimension
        )
        return {**self.base_env(), **self.aws.env(), **contract}

    def _completed(self) -> int:
        keys = local_aws.list_keys(self.aws, OUTPUTS_PREFIX)
        return sum(1 for key in keys if key.endswith(".json"))

    def _submit(self) -> None:
        from tts_fleet.client.submit import submit_jobs

        if not self.jobs:
            return
        self._store_book()
        self.submitted_at = time.time()
        report = submit_jobs(self.aws.sqs, self.aws.queue_url, self.jobs)
        self.submitted = list(report.sent)
        for job_id, reason in report.failed.items():
            self.console.print(f"not sent: {job_id}: {reason}", markup=False, highlight=False)
        self.events.write("submitted", sent=len(report.sent), failed=len(report.failed))

    def _store_book(self) -> None:
        """An EPUB input's book record and cover, as `submit` writes them: into the emulator's
        bucket (for `results --book` from another terminal while --keep-running) and into
        --out under the same keys (`books/<book>.json`, `books/<book>/cover.<ext>`), which
        outlive the emulator."""
        from tts_fleet.client.aws import Target
        from tts_fleet.client.epub import is_epub
        from tts_fleet.client.submit import store_book

        if not (self.options.input and is_epub(Path(self.options.input))):
            return
        book = load_input(self.options, self.cfg).book
        if book is None:
            return
        target = Target(self.aws.queue_url, self.aws.dlq_url, self.aws.bucket)
        key = store_book(self.aws.s3, target, book)
        record = book.record()
        keys = [key] + ([record.cover_key] if record.cover_key else [])
        for stored in keys:
            path = self.out_dir / stored
            path.parent.mkdir(parents=True, exist_ok=True)
            body = self.aws.s3.get_object(Bucket=self.aws.bucket, Key=stored)["Body"].read()
            path.write_bytes(body)
        self.events.write("book_stored", book=book.book, chapters=len(book.chapters), key=key)

    def _loop(self) -> None:
        with LiveView(self.console, self.cfg.scaling.idle_minutes) as view:
            while True:
                sample = self.scaler.step()
                self.samples.append(sample)
                view.update(sample, len(self.submitted))
                self._fetch_finished()
                self._check_health(view, sample)
                if not self.options.keep_running and self.scaler.settled(sample):
                    return
                # A tick (--tick seconds) per alarm evaluation; a sixth of one per sample.
                if self.stopper.stop.wait(self.options.tick * self.scaler.interval_ticks):
                    view.draining(sample.in_flight)
                    return

    def _fetch_finished(self) -> None:
        """Copies each finished job's audio and manifest into --out as it finishes, so a
        closed terminal or a kill loses no output that was done (the end copies the rest)."""
        keys = local_aws.list_keys(self.aws, OUTPUTS_PREFIX)
        # A job is fetched once its manifest exists (the audio is written before it).
        new = [k for k in keys if k.endswith(".json") and k not in self._fetched]
        local_aws.download_outputs(self.aws, new, self.out_dir)
        self._fetched.update(new)

    def _check_health(self, view: LiveView, sample: Tick) -> None:
        """Says when a worker dies on its own; stops a run that cannot make progress."""
        crashed = self.pool.crashed
        for task in crashed[self._crashes_seen :]:
            code = task.proc.returncode if task.proc else None
            view.note(f"{task.id} exited on its own (code {code}); log: {self.pool.log_of(task)}")
        self._crashes_seen = len(crashed)
        if len(crashed) >= MAX_CRASHES_WITHOUT_PROGRESS and sample.completed == 0:
            log = self.pool.log_of(crashed[-1])
            raise RuntimeError(f"workers keep exiting and none finished a job; see {log}")
        if self.speech.poll() is not None:
            log = self.log_dir / "speech-server.log"
            raise RuntimeError(
                f"the speech server exited (code {self.speech.returncode}); see {log}"
            )

    def connection_env(self) -> dict[str, str]:
        """What another terminal needs to `tts-fleet submit` to this run."""
        return {
            **self.aws.env(),
            ENV_QUEUE_URL: self.aws.queue_url,
            ENV_DLQ_URL: self.aws.dlq_url,
            ENV_BUCKET: self.aws.bucket,
        }


def local_controller_params(cfg: StackConfig, options: LocalOptions) -> ControllerParams:
    """The policy's parameters on the fleet's own clock, where one tick is a minute: the
    cold start is --cold-start-ticks minutes (at least a process start); wall seconds scale
    by 60 / --tick."""
    clock_per_wall_s = PERIOD_S / options.tick
    # espeak has no batching gain to count on: c in flight take as long each as one alone.
    batching = Batching(base_s=LOCAL_JOB_WALL_S * clock_per_wall_s, alpha=0.0)
    concurrency = cfg.worker.concurrency
    return ControllerParams.from_config(
        cfg.scaling,
        cold_start_s=max(options.cold_start_ticks * PERIOD_S, LOCAL_BOOT_WALL_S * clock_per_wall_s),
        seconds_per_job=batching.seconds_per_job(concurrency),
        concurrency=concurrency,
        cold_start_work=cfg.scaling.cold_start_work,
        host_idle_seconds=cfg.scaling.host_idle_seconds,
    )


def summary_json(summary: Summary) -> str:
    return json.dumps(summary.to_json(), indent=2)


def jobs_for(options: LocalOptions, cfg: StackConfig) -> tuple[list[Job], list[str]]:
    """The demo jobs or the user's input, and one line per invalid input. Raises VoiceError
    for a --library-voice that cannot be a voice, before anything starts."""
    for spec in options.library_voices:
        VoiceFile.parse(spec)
    if options.demo:
        from tts_fleet.local.demo import demo_jobs

        jobs = demo_jobs(options.demo)
        if _job_defaults(options):  # the demo's ids stay: --voice changes the voice only
            jobs = [job.model_copy(update=_job_defaults(options)) for job in jobs]
        return jobs, []
    if options.input:
        loaded = load_input(options, cfg)
        return loaded.valid, [line.describe() for line in loaded.invalid]
    return [], []


def load_input(options: LocalOptions, cfg: StackConfig) -> LoadedJobs:
    """--input read as `submit` reads it (the stack's text limit, --split-chars, --lexicon)."""
    from tts_fleet.client.inputs import load_jobs
    from tts_fleet.client.lexicon import load_lexicon

    lexicon = load_lexicon(options.lexicon) if options.lexicon else None
    library = tuple(VoiceFile.parse(spec).name for spec in options.library_voices)
    return load_jobs(
        options.input,
        cfg.worker.max_text_chars,
        _job_defaults(options),
        options.split_chars,
        lexicon=lexicon,
        voices=(*CUSTOM_VOICE_SPEAKERS, *library),
    )


def _job_defaults(options: LocalOptions) -> dict[str, str]:
    """--voice / --language for jobs that do not set their own."""
    pairs = (("voice", options.voice), ("language", options.language))
    return {key: value for key, value in pairs if value}


def describe_env(env: dict[str, str]) -> Iterator[str]:
    for key, value in env.items():
        yield f"export {key}={value}"
