"""Discrete-event simulation of a scaling policy on a workload trace (DESIGN §4, §6).

- arrivals join one FIFO queue; outstanding = visible + in flight;
- the scaling mode is the one `Policy` of `tts_fleet.scaling.policy` that the local fleet and
  the deployed controller drive too (tts_fleet/sim/scalers.py puts it on this clock); in the
  alarms mode CloudWatch, the alarms and Application Auto Scaling are
  `tts_fleet.scaling.alarms`: a minute's datapoint is its maximum outstanding (the
  alarms use Maximum), published `metric_lag_s` after the minute ends; each minute the real
  `AlarmModel` turns the published datapoints into the desired count, clamped to
  [minWorkers, maxWorkers], as AAS applies the ExactCapacity step (and re-applies it every
  minute the alarm stays in ALARM). Both alarms read one snapshot of the series, so they are
  never in ALARM together; the autoscaler's docstring says why that is AWS's settled outcome;
- the ECS service reconciles: a new task takes a warm host (kept `host_idle_seconds`: no
  provisioning, no pull) or a cold one (provisioning, pull, model load, warm-up); surplus
  tasks stop pending-first, then idle ones; busy tasks are protected until idle;
- a task stopped while pending (scale-in before it ran) is no start, cold or warm: it is
  counted as cancelled. Its host, if still launching, registers with no task and is idle
  from then (no pull: the pull is a task's); a new task may still claim it, else it goes
  after `host_idle_seconds` and is billed from launch to then;
- workers have `concurrency` slots and the profile's batching latency;
- with capacity pools (`PolicySetup.pools`, issue #22) each pool is its own service with its
  own hosts (a host serves only its pool's tasks), the controller's placement sets each
  service's count, and tts_fleet/sim/capacity.py's interruptions and outages act on them: an
  interrupted host's task drains within the notice while its service starts a replacement; a
  task asked for in an outage waits for capacity (PROVISIONING, unbilled) and its service
  reports placement failures meanwhile.

Only events cost time (completions, task/host transitions, one tick per minute, skipped while
nothing happens), so 100,000 jobs take well under a second. The only randomness is host
provisioning jitter, from `seed` (and the interruptions, from their own generator seeded by
`seed`, so a run without them draws exactly what it always drew).
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left, bisect_right
from collections import deque

from tts_fleet.scaling.physics import Profile
from tts_fleet.scaling.pools import INTERRUPTION_WINDOW_S, PoolObservation, fill_order, place
from tts_fleet.sim.capacity import NOTICE_S, PLACEMENT_RETRY_S, Capacity
from tts_fleet.sim.deadlines import BatchBook, judge, trace_batches
from tts_fleet.sim.model import PolicySetup
from tts_fleet.sim.report import (
    CostRates,
    Sample,
    SimResult,
    outage_results,
    pool_usage,
    summarise,
)
from tts_fleet.sim.scalers import PEER_VISIBILITY_S, PolicyScaler, View, make_scaler
from tts_fleet.sim.state import NO_POOL, Fleet, Host, ServiceTask
from tts_fleet.sim.traces import Trace

# Event kinds, in the order they run at the same instant: a finishing job frees its slot
# before anything else looks at the queue; the minute closes (so a burst is never one step
# across a boundary) before a job that arrives exactly on it, which belongs to the next
# minute; that job reaches an idle worker before the alarm evaluation, as a long-polling
# worker would (AAS and ECS take seconds to stop a task).
# A killed job reappears (_REVEAL) like an arrival. A Spot notice (_INTERRUPT) and the end of
# it (_RECLAIM) come after the host events of the same instant.
_DONE, _CLOSE, _ARRIVAL, _REVEAL, _READY, _EXPIRE, _INTERRUPT, _RECLAIM, _TICK = range(9)
# The fleet never settles with min_workers > 0; stop this long after the trace at the latest.
MAX_TAIL_S = 30 * 86400.0


class Simulation:
    def __init__(
        self,
        trace: Trace,
        profile: Profile,
        policy: PolicySetup,
        seed: int = 0,
        capacity: Capacity | None = None,
        deadline_s: float | None = None,
    ):
        self.trace, self.profile, self.policy = trace, profile, policy
        # `--deadline`: the trace's batches, handed to the scaler at each evaluation.
        self.book = None if deadline_s is None else BatchBook(trace_batches(trace, deadline_s))
        self.rng = random.Random(seed)
        # What names no pool of this run acts on nothing (a peer has fewer pools).
        self.capacity = Capacity() if capacity is None else capacity
        self.interruption_rng = random.Random(f"interruptions:{seed}")
        self.pooled = bool(policy.pools)
        self.pool_names = tuple(p.name for p in fill_order(policy.pools)) or (NO_POOL,)
        self.scaler = make_scaler(policy, profile)
        self.period = self.scaler.period_s
        self.arrivals = trace.arrivals
        self.finish = [math.nan] * len(trace.arrivals)
        self.arrived = self.started = self.done = 0
        # Jobs of stopped unprotected tasks: hidden until their visibility timeout, then
        # visible again ahead of the FIFO (SQS makes no order promise; first is fair).
        self.hidden = 0
        self.retry: deque[int] = deque()
        self.processing = 0  # jobs on workers
        self.fleet = Fleet()
        # (time, kind, seq, payload): seq is unique, so payloads are never compared.
        self.events: list[tuple[float, int, int, tuple[int, int]]] = []
        self.seq = 0
        self.free: list[tuple[int, int]] = []  # (in_flight, task id) with a free slot, lazy
        self.samples: list[Sample] = []

    # -- event plumbing --------------------------------------------------------------
    def _push(self, time: float, kind: int, payload: tuple[int, int] = (0, 0)) -> None:
        self.seq += 1
        heapq.heappush(self.events, (time, kind, self.seq, payload))

    def run(self) -> tuple[list[float], list[Sample], Fleet, float]:
        first = self.period
        if self.arrivals and self.policy.scaling.min_workers == 0:
            wake = self.scaler.wake(self.arrivals[0])  # the controller, woken by the submit
            first = wake if 0 < wake < first else first
        self._push(first, _CLOSE)
        self._push(first, _TICK)
        self._warm_floor()
        self.samples.append(self._sample(0.0))
        handlers = {
            _DONE: self._job_done,
            _CLOSE: self._close_minute,
            _READY: self._task_ready,
            _EXPIRE: self._host_expire,
            _REVEAL: self._reveal,
            _INTERRUPT: self._interrupt,
            _RECLAIM: self._reclaim,
        }
        n = len(self.arrivals)
        while self.events:
            time, kind, _, payload = self.events[0]
            if self.arrived < n and (self.arrivals[self.arrived], _ARRIVAL) < (time, kind):
                self._arrive(time, kind)
                continue
            heapq.heappop(self.events)
            if kind == _TICK:
                if self._tick(time):
                    return self.finish, self.samples, self.fleet, time
            else:
                handlers[kind](time, payload)
        raise AssertionError("the minute tick always reschedules itself")

    # -- queue and workers -------------------------------------------------------------
    def _arrive(self, until: float, kind: int) -> None:
        """Arrivals before the next event. With jobs already waiting no slot is free, so a
        whole stretch (a burst) is one step; otherwise one instant at a time, dispatched."""
        side = bisect_right if kind > _ARRIVAL else bisect_left
        limit = side(self.arrivals, until)
        now = self.arrivals[self.arrived]
        if self.started == self.arrived and not self.retry:
            limit = min(limit, bisect_right(self.arrivals, now))
        self.arrived = limit
        # The queue only grows over a stretch: its last value is the stretch's maximum. A
        # job taken at once by a long-polling worker is never counted visible.
        self._dispatch(self.arrivals[limit - 1])

    def _observe(self, now: float) -> None:
        visible = self.arrived - self.started + len(self.retry)
        self.scaler.observe(now, visible, self.processing + self.hidden)

    def _next_job(self) -> int | None:
        if self.retry:
            return self.retry.popleft()
        if self.started < self.arrived:
            self.started += 1
            return self.started - 1
        return None

    def _dispatch(self, now: float) -> None:
        concurrency = self.policy.concurrency
        batching = self.profile.batching
        while (self.retry or self.started < self.arrived) and self.free:
            in_flight, task_id = heapq.heappop(self.free)
            task = self.fleet.tasks.get(task_id)
            if task is None and self.fleet.draining:
                task = self.fleet.draining.get(task_id)
            if task is None or not task.ready or task.in_flight != in_flight:
                continue  # stale entry
            job = self._next_job()
            assert job is not None
            task.in_flight += 1
            task.jobs.add(job)
            self.processing += 1
            self._push(now + batching.latency(task.in_flight), _DONE, (job, task_id))
            if task.in_flight < concurrency:
                heapq.heappush(self.free, (task.in_flight, task_id))
        self._observe(now)

    def _job_done(self, now: float, payload: tuple[int, int]) -> None:
        job, task_id = payload
        task = self.fleet.tasks.get(task_id)
        draining = task is None and task_id in self.fleet.draining
        if draining:
            task = self.fleet.draining[task_id]
        if task is None or job not in task.jobs:
            return  # its task was stopped under it: the job went back to the queue
        task.jobs.discard(job)
        self.finish[job] = now
        self.done += 1
        if self.book is not None:
            self.book.job_done(job)
        self.processing -= 1
        task.in_flight -= 1
        heapq.heappush(self.free, (task.in_flight, task_id))
        self._dispatch(now)
        if draining:  # an interrupted worker serves on until its host goes
            return
        if task.in_flight == 0 and self._over(task.pool):
            self._stop(now, task_id)  # protection dropped with the last job: ECS stops it now

    def _over(self, pool: str) -> bool:
        """The pool's service has more tasks than it wants."""
        fleet = self.fleet
        if not self.pooled:
            return len(fleet.tasks) > fleet.desired
        live = sum(1 for t in fleet.tasks.values() if t.pool == pool)
        return live > fleet.pool_desired.get(pool, 0)

    # -- ECS service and Managed Instances -----------------------------------------------
    def _reconcile(self, now: float) -> None:
        for pool in self.pool_names:
            self._reconcile_pool(now, pool)

    def _reconcile_pool(self, now: float, pool: str) -> None:
        fleet = self.fleet
        desired = fleet.pool_desired.get(pool, 0)
        tasks = fleet.tasks.items()
        live = [(i, t) for i, t in tasks if t.pool == pool] if self.pooled else list(tasks)
        for _ in range(desired - len(live)):
            self._start_task(now, pool)
        surplus = len(live) - desired
        if surplus <= 0:
            return
        # Pending tasks do no work: stop those first (newest first), then idle ones. Busy
        # tasks are protected; `_job_done` stops them when their last job finishes. Without
        # protection the newest go, busy or not (a ReplicaSet's deletion order).
        protected = self.scaler.protects_busy
        order = sorted(live, key=lambda kv: (kv[1].ready, -kv[0]))
        for task_id, task in order:
            if surplus == 0:
                break
            if task.in_flight == 0 or not protected:
                self._stop(now, task_id)
                surplus -= 1

    def _warm_floor(self) -> None:
        """minWorkers > 0 is an always-on fleet: it is already up when the trace starts
        (with pools, placed as the controller would place it on an empty fleet)."""
        fleet, policy = self.fleet, self.policy
        fleet.desired = policy.scaling.min_workers
        fleet.pool_desired = {NO_POOL: fleet.desired}
        if self.pooled and policy.placement is not None:
            placed = place(policy.pools, policy.placement, (), {}, fleet.desired, 0.0)
            fleet.pool_desired = placed.by_pool()
            fleet.desired = sum(fleet.pool_desired.values())
        for pool in self.pool_names:
            for _ in range(fleet.pool_desired.get(pool, 0)):
                host = Host(len(fleet.hosts), 0.0, 0.0, image_at=0.0, task=fleet.next_task)
                host.pool = pool
                fleet.hosts.append(host)
                self._schedule_interruption(host)
                fleet.tasks[fleet.next_task] = ServiceTask(host, cold=False, ready=True, pool=pool)
                heapq.heappush(self.free, (0, fleet.next_task))
                fleet.next_task += 1

    def _start_task(self, now: float, pool: str = NO_POOL) -> None:
        fleet, profile = self.fleet, self.profile
        placed = now + profile.task_placement_s
        host = self._claim_host(placed, pool)
        if host.image_at is None:  # this task's pull starts once the host has registered
            host.image_at = max(placed, host.provisioned_at) + profile.pull_s
        task_id = fleet.next_task
        fleet.next_task += 1
        host.task = task_id
        # Warm: the host is up with the image pulled; else the task waits for provisioning.
        fleet.tasks[task_id] = ServiceTask(
            host, cold=host.image_at > placed, pool=pool, placed_at=now
        )
        if self.pooled:
            fleet.starts.append((now, pool))
        ready = max(placed, host.image_at) + profile.model_load_s + profile.warmup_s
        self._push(ready, _READY, (task_id, 0))

    def _claim_host(self, placed: float, pool: str = NO_POOL) -> Host:
        """A spare host of the pool (warm, or still launching for a cancelled task),
        readiest first; else a new one, launched when the pool has capacity. One task per
        host: the capacity provider launches instances with exactly gpu.gpuCount GPUs and the
        task definition asks for all of them."""
        fleet, profile = self.fleet, self.profile
        spare = [h for h in fleet.spare.values() if h.pool == pool] if self.pooled else fleet.spare
        if spare:
            pull = profile.pull_s

            def image_ready(h: Host) -> float:
                return h.image_at if h.image_at is not None else h.provisioned_at + pull

            candidates = spare.values() if isinstance(spare, dict) else spare
            host = min(candidates, key=lambda h: (image_ready(h), h.index))
            del fleet.spare[host.index]
            return host
        provisioning = profile.host_provisioning_s + self.rng.uniform(
            0.0, profile.host_provisioning_jitter_s
        )
        launched = self.capacity.capacity_from(pool, placed)
        host = Host(len(fleet.hosts), launched, launched + provisioning, pool=pool)
        fleet.hosts.append(host)
        self._schedule_interruption(host)
        return host

    # -- Spot interruptions (tts_fleet/sim/capacity.py) -----------------------------------
    def _schedule_interruption(self, host: Host) -> None:
        rate = self.capacity.rate_per_hour(host.pool)
        if rate > 0:
            at = host.launched + self.interruption_rng.expovariate(rate / 3600.0)
            self._push(at, _INTERRUPT, (host.index, 0))

    def _interrupt(self, now: float, payload: tuple[int, int]) -> None:
        """The 2-minute notice: ECS drains the instance and its service starts a replacement
        now (the draining task no longer counts as one of its tasks); the worker, told
        nothing, serves on until the host goes at the notice's end."""
        fleet = self.fleet
        host = fleet.hosts[payload[0]]
        if host.gone is not None:
            return  # scaled in before the notice
        fleet.interruptions.setdefault(host.pool, []).append(now)
        host.gone = now + NOTICE_S
        host.token += 1  # a pending idle expiry no longer applies
        fleet.spare.pop(host.index, None)
        if host.task is not None:
            task_id, host.task = host.task, None
            task = fleet.tasks.pop(task_id)
            if not task.ready:  # ECS stops a draining instance's PENDING tasks at once
                fleet.cancelled_starts += 1
            else:
                fleet.draining[task_id] = task
                self._push(host.gone, _RECLAIM, (task_id, 0))
        self._reconcile(now)
        self._observe(now)

    def _reclaim(self, now: float, payload: tuple[int, int]) -> None:
        """The notice is over, the host goes: jobs the worker still holds go back to the
        queue (SIGTERM as the instance shuts down: its drain releases them with visibility
        0, DESIGN §5.6)."""
        task = self.fleet.draining.pop(payload[0], None)
        if task is None:
            return
        for job in sorted(task.jobs):
            self.processing -= 1
            self.retry.append(job)
        task.jobs.clear()
        task.in_flight = 0
        self._dispatch(now)

    def _task_ready(self, now: float, payload: tuple[int, int]) -> None:
        task_id = payload[0]
        task = self.fleet.tasks.get(task_id)
        if task is None:
            return  # stopped while pending
        task.ready = True
        if task.cold:
            self.fleet.cold_starts += 1
        else:
            self.fleet.warm_starts += 1
        heapq.heappush(self.free, (0, task_id))
        self._dispatch(now)
        if task.in_flight == 0 and self._over(task.pool):
            self._stop(now, task_id)

    def _stop(self, now: float, task_id: int) -> None:
        task = self.fleet.tasks.pop(task_id)
        assert task.in_flight == 0 or not self.scaler.protects_busy, "busy tasks are protected"
        self._kill(now, task)
        host = task.host
        host.task = None
        host.token += 1
        if not task.ready:
            self.fleet.cancelled_starts += 1
            if host.image_at is not None and host.image_at > now:
                host.image_at = None  # the stopped task's pull is abandoned with it
        if host.launched > now:
            host.gone = host.launched  # it waited for capacity: no instance was ever launched
            return
        self.fleet.spare[host.index] = host
        keep = self.policy.host_idle_seconds
        if keep >= 0:  # -1: Managed Instances never scales the idle host in
            # A host still launching for a cancelled task idles from when it registers: the
            # sample (scaleInAfter 0) terminates it then unless a new task has claimed it.
            idle_from = max(now, host.provisioned_at)
            self._push(idle_from + keep, _EXPIRE, (host.index, host.token))

    def _kill(self, now: float, task: ServiceTask) -> None:
        """An unprotected task stopped with jobs: they reappear after the visibility timeout."""
        for job in sorted(task.jobs):
            self.processing -= 1
            self.hidden += 1
            self.fleet.killed_jobs += 1
            self._push(now + PEER_VISIBILITY_S, _REVEAL, (job, 0))
        task.jobs.clear()
        task.in_flight = 0
        self._observe(now)

    def _reveal(self, now: float, payload: tuple[int, int]) -> None:
        self.hidden -= 1
        self.retry.append(payload[0])
        self._dispatch(now)

    def _host_expire(self, now: float, payload: tuple[int, int]) -> None:
        index, token = payload
        host = self.fleet.hosts[index]
        if host.task is None and host.token == token:  # not reused since it went idle
            host.gone = now
            del self.fleet.spare[index]

    # -- the scaler (alarms, controller or a peer) -------------------------------------------
    def _close_minute(self, now: float, payload: tuple[int, int]) -> None:
        self._observe(now)

    def _view(self, now: float) -> View:
        tasks = self.fleet.tasks.values()
        running = sum(1 for t in tasks if t.ready)
        visible = self.arrived - self.started + len(self.retry)
        in_flight = self.processing + self.hidden
        pools = tuple(self._pool_view(now, p) for p in self.pool_names) if self.pooled else ()
        batches = () if self.book is None else self.book.open_at(now, self.arrived)
        return View(now, visible, in_flight, running, len(self.fleet.tasks) - running,
                    self.fleet.desired, pools, batches)  # fmt: skip

    def _pool_view(self, now: float, pool: str) -> PoolObservation:
        """One pool's service as the controller reads it: its counts, how long its oldest
        task has waited for capacity, its newest placement failure, its interruptions."""
        tasks = [t for t in self.fleet.tasks.values() if t.pool == pool]
        running = sum(1 for t in tasks if t.ready)
        waiting = [t.placed_at for t in tasks if t.host.launched > now]
        placement = self.profile.task_placement_s
        failure = None
        for asked in waiting:  # each attempt fails: at placement, then every PLACEMENT_RETRY_S
            tried = asked + placement
            if tried <= now and self.capacity.reports_failures(pool, tried):
                last = tried + math.floor((now - tried) / PLACEMENT_RETRY_S) * PLACEMENT_RETRY_S
                failure = last if failure is None else max(failure, last)
        recent = self.fleet.interruptions.get(pool, [])
        return PoolObservation(
            name=pool,
            desired=self.fleet.pool_desired.get(pool, 0),
            running=running,
            pending=len(tasks) - running,
            oldest_provisioning_s=now - min(waiting) if waiting else 0.0,
            placement_failure_at=failure,
            interruptions=tuple(t for t in recent if t > now - INTERRUPTION_WINDOW_S),
        )

    def _tick(self, now: float) -> bool:
        """The scaler's evaluation: desired count, reconcile; True when the run is over."""
        fleet = self.fleet
        fleet.desired = self.scaler.decide(self._view(now))
        fleet.pool_desired = {NO_POOL: fleet.desired}
        if self.pooled:
            scaler = self.scaler
            assert isinstance(scaler, PolicyScaler)  # make_scaler: pools need the controller
            fleet.pool_desired = {t.name: t.desired for t in scaler.targets}
            fleet.desired = sum(fleet.pool_desired.values())
            for event in scaler.pool_events:
                if event.kind == "unavailable":
                    fleet.fallbacks[event.pool] = fleet.fallbacks.get(event.pool, 0) + 1
        self._reconcile(now)
        self.samples.append(self._sample(now))
        if self._finished(now):
            return True
        nxt = self._next_tick(now)
        self._push(nxt, _CLOSE)
        self._push(nxt, _TICK)
        return False

    def _sample(self, now: float) -> Sample:
        running = sum(1 for t in self.fleet.tasks.values() if t.ready)
        return Sample(now, self.arrived - self.done, self.fleet.desired, running, self.done)

    def _finished(self, now: float) -> bool:
        if now > self.trace.horizon_s + MAX_TAIL_S:
            return True
        if self.done < len(self.arrivals) or now < self.trace.horizon_s:
            return False
        tasks_down = len(self.fleet.tasks) <= self.policy.scaling.min_workers
        idle_hosts = self.policy.host_idle_seconds >= 0 and bool(self.fleet.spare)
        busy = self.hidden or self.fleet.draining
        return self.scaler.settled() and tasks_down and not idle_hosts and not busy

    def _next_tick(self, now: float) -> float:
        """The next evaluation, or — fleet at zero, nothing queued — the one that follows
        the next arrival (the arrival's minute for the alarms)."""
        nxt = now + self.period
        quiet = (
            self.scaler.quiet()  # a late datapoint may still scale out
            and self.arrived == self.done
            and self.arrived < len(self.arrivals)
            and self.fleet.desired == 0
            and not self.fleet.tasks
            and not self.fleet.spare
        )
        if not quiet:
            return nxt
        # The skipped minutes hold nothing outstanding: the autoscaler closes them as zeros.
        wake = self.scaler.wake(self.arrivals[self.arrived])
        return wake if wake > now else nxt


def simulate(
    trace: Trace,
    profile: Profile,
    policy: PolicySetup,
    rates: CostRates,
    seed: int = 0,
    capacity: Capacity | None = None,
    deadline_s: float | None = None,
) -> SimResult:
    """One run; with `deadline_s` (`--deadline`) every batch of the trace has that deadline
    (tts_fleet/sim/deadlines.py), the controller plans for them and the result says which
    were met."""
    sim = Simulation(trace, profile, policy, seed, capacity, deadline_s)
    finish, samples, fleet, end = sim.run()
    gpu_seconds = sum((h.gone if h.gone is not None else end) - h.launched for h in fleet.hosts)
    pools = pool_usage(policy.pools, fleet, end) if sim.pooled else ()
    # A request cut while it waited for capacity in an outage launched no host.
    launched = sum(1 for h in fleet.hosts if h.gone is None or h.gone > h.launched)
    return summarise(
        trace=trace,
        profile=profile,
        policy=policy,
        rates=rates,
        finish=finish,
        samples=samples,
        gpu_seconds=gpu_seconds,
        end=end,
        starts=(fleet.cold_starts, fleet.warm_starts, fleet.cancelled_starts, launched),
        killed_jobs=fleet.killed_jobs,
        pools=pools,
        outages=outage_results(fleet, sim.capacity),
        deadlines=None
        if sim.book is None or deadline_s is None
        else judge(sim.book.batches, finish, deadline_s),
    )
