"""What-if for autoscaling: replay a traffic curve through the scaling policies servekit's control plane runs,
and report per step the instances asked for and serving, utilisation, queued and shed requests, an estimated p99
and the cost (``servekit autoscale simulate``; :func:`simulate` and :func:`compare` for Python).

Nothing is re-implemented: the replay drives :class:`servekit.services.autoscaling.runner.Autoscaler` itself — the loop
``servekit up`` runs, with its target-tracking (:func:`~servekit.services.autoscaling.target_tracking.decide`), step
(:func:`~servekit.services.autoscaling.step.step_run`) and scheduled-action
(:func:`~servekit.services.autoscaling.scheduled.last_fire`)
decisions, its cooldowns and its rule that a change is judged only on a period measured after it — over an
in-memory copy of the autoscaling state, the policies put through
:class:`~servekit.services.autoscaling.api.AutoscalingApi`
(validated as the API validates them), a simulated clock, a simulated endpoint and simulated metric datapoints.
Step policies run from CloudWatch alarms evaluated by :func:`servekit.services.cloudwatch.evaluation.evaluate`.

Two modes:

- ``real``: as on ``servekit up``. The scaler ticks every ``tick_s``; it reads complete ``period_s`` periods of
  ``InvocationsPerInstance`` (the offered load over the serving instances), so AlarmHigh needs 3 periods above
  the target and AlarmLow 15 below 90 % of it; cooldowns apply; a new instance serves ``startup_s`` after it is
  asked for (until then the endpoint is Updating and the old instances carry the load). The lag is visible: the
  report counts the steps served by fewer (or more) instances than the formula's and says why.
- ``formula``: the seed's idealisation, the same decision code evaluated once per step on that step's own load:
  the period is the step, the metric of a step is known at its start, AlarmHigh/AlarmLow take one datapoint
  and AlarmLow fires below the target itself (no 90 % dead band), changes serve at once, cooldowns as given.
  With cooldowns of 0, target tracking's ``ceil(current x metric / target)`` is then exactly
  ``N = ceil(rps / (capacity x target))`` clamped to [min, max]. The CLI picks it when ``--cooldown-s 0`` and no
  start-up time are given (``--mode`` says otherwise).

Load, queue and cost per step: each slice of ``dt`` seconds offers ``rps x dt`` requests to the serving
instances; what their capacity cannot absorb queues up to ``max_queue_s`` of capacity and the rest is shed. The
fleet is billed for the instances asked for (starting ones included) at the hourly price.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.names import Account
from servekit.services.autoscaling import store as autoscaling_state
from servekit.services.autoscaling.api import DIMENSION, NAMESPACE, AutoscalingApi
from servekit.services.autoscaling.runner import Autoscaler
from servekit.services.autoscaling.sim_fleet import Fleet, Policy, SimError, formula_count
from servekit.services.autoscaling.store import Autoscaling
from servekit.services.autoscaling.target_tracking import INVOCATIONS_PER_INSTANCE, TargetTrackingPolicy
from servekit.services.autoscaling.traffic import Curve
from servekit.services.cloudwatch.alarms import AlarmAction
from servekit.services.cloudwatch.evaluation import AlarmConfigError, AlarmDefinition, AlarmState, evaluate
from servekit.services.cloudwatch.source import MetricQuery
from servekit.state.migrations import migrate

ENDPOINT, VARIANT = "what-if", "AllTraffic"
RESOURCE = f"endpoint/{ENDPOINT}/variant/{VARIANT}"
T0 = 1_704_067_200.0  # 2024-01-01T00:00:00Z: where time_s 0 falls unless a start is given (schedules read it)


@dataclass(frozen=True, slots=True)
class SimStep:
    time_s: float
    rps: float
    desired: int  # DesiredInstanceCount at the step's end
    serving: int  # instances serving at the step's end
    formula: int | None  # the seed's count for this step's rate (None without a target)
    utilization: float  # offered load / serving capacity over the step
    served: float
    queued: float  # waiting at the step's end
    shed: float
    p99_ms: float
    over_slo: bool
    cost: float
    cumulative_cost: float
    events: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "time_s": self.time_s,
            "rps": self.rps,
            "instances": self.desired,
            "desired": self.desired,
            "serving": self.serving,
            "formula_instances": self.formula,
            "utilization": round(self.utilization, 4),
            "served": round(self.served, 3),
            "queued": round(self.queued, 3),
            "shed": round(self.shed, 3),
            "p99_ms": round(self.p99_ms, 3),
            "over_slo": self.over_slo,
            "cost": round(self.cost, 6),
            "cumulative_cost": round(self.cumulative_cost, 6),
            "events": list(self.events),
        }


@dataclass(frozen=True, slots=True)
class SimReport:
    policy: Policy
    fleet: Fleet
    step_s: float
    curve_source: str
    steps: tuple[SimStep, ...]
    explanation: tuple[str, ...]
    activities: tuple[dict[str, Any], ...]
    start: float = T0  # the epoch time_s 0 stands for
    curve_epoch: float | None = None  # when a recorded curve's time_s 0 happened

    @property
    def total_cost(self) -> float:
        return sum(s.cost for s in self.steps)

    @property
    def cost_per_hour(self) -> float:
        """The fleet at the last step, an hour of it."""
        return self.steps[-1].desired * self.fleet.price_per_hour

    @property
    def duration_s(self) -> float:
        return len(self.steps) * self.step_s

    @property
    def requests(self) -> float:
        return sum(s.rps * self.step_s for s in self.steps)

    @property
    def shed(self) -> float:
        return sum(s.shed for s in self.steps)

    @property
    def time_over_slo_s(self) -> float:
        return sum(self.step_s for s in self.steps if s.over_slo)

    @property
    def cost_per_1k(self) -> float | None:
        return self.total_cost / self.requests * 1000 if self.requests > 0 else None

    @property
    def lag(self) -> tuple[int, int]:
        """Steps asking for fewer / more instances than the formula's count."""
        under = sum(1 for s in self.steps if s.formula is not None and s.desired < s.formula)
        over = sum(1 for s in self.steps if s.formula is not None and s.desired > s.formula)
        return under, over

    def to_json(self) -> dict[str, Any]:
        p, f = self.policy, self.fleet
        per_1k = self.cost_per_1k
        under, over = self.lag
        return {
            "policy": p.label,
            "mode": p.mode,
            "explanation": list(self.explanation),
            "traffic": self.curve_source,
            "traffic_epoch": self.curve_epoch,
            "step_s": self.step_s,
            "fleet": {
                "instance_type": f.instance_type,
                "capacity_rps": f.capacity_rps,
                "capacity_source": f.capacity_source,
                "price_per_hour": f.price_per_hour,
                "startup_s": f.startup_s,
                "slo_ms": f.slo_ms,
                "max_queue_s": f.max_queue_s,
                "latency_model": f.latency.label,
            },
            "scaling": {
                "min": p.min_capacity,
                "max": p.max_capacity,
                "target_utilization": p.target_utilization,
                "scale_out_cooldown_s": p.scale_out_cooldown_s,
                "scale_in_cooldown_s": p.scale_in_cooldown_s,
                "period_s": self.step_s if p.mode == "formula" else p.period_s,
                "step_policies": [s.name for s in p.steps],
                "scheduled_actions": [{"name": s.name, "schedule": s.schedule} for s in p.scheduled],
            },
            "steps": [s.to_json() for s in self.steps],
            "cost_per_hour": round(self.cost_per_hour, 6),
            "total_cost": round(self.total_cost, 6),
            "average_cost_per_hour": round(self.total_cost / self.duration_s * 3600, 6),
            "cost_per_1k_requests": None if per_1k is None else round(per_1k, 6),
            "requests": round(self.requests, 3),
            "requests_shed": round(self.shed, 3),
            "time_over_slo_s": self.time_over_slo_s,
            "steps_below_formula": under,
            "steps_above_formula": over,
            "activities": list(self.activities),
        }


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class _Endpoint:
    """The variant as the scaler sees it: an update leaves it Updating until the new instances have started
    (``startup_s``); instances removed stop serving at once."""

    def __init__(self, count: int, startup_s: float, clock: _Clock) -> None:
        self.desired = self.serving = count
        self.status = "InService"
        self.ready_at = 0.0
        self.startup_s = startup_s
        self.clock = clock

    def advance(self) -> None:
        if self.status == "Updating" and self.clock.now >= self.ready_at:
            self.serving, self.status = self.desired, "InService"

    async def describe_endpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        self.advance()
        variant = {"VariantName": VARIANT, "CurrentInstanceCount": self.serving, "DesiredInstanceCount": self.desired}
        return {"EndpointName": ENDPOINT, "EndpointStatus": self.status, "ProductionVariants": [variant]}

    async def update_endpoint_weights_and_capacities(self, p: dict[str, Any]) -> dict[str, Any]:
        self.advance()
        if self.status != "InService":
            raise validation_exception(f'Cannot update in-progress endpoint "{ENDPOINT}".')
        [change] = p["DesiredWeightsAndCapacities"]
        self.desired = int(change["DesiredInstanceCount"])
        self.serving = min(self.serving, self.desired)  # scale-in: the removed instances stop at once
        self.status, self.ready_at = "Updating", self.clock.now + self.startup_s
        return {"EndpointArn": f"arn:aws:sagemaker:us-east-1:000000000000:endpoint/{ENDPOINT}"}


class _Metrics:
    """The endpoint metrics store of the replay: per period, the Sum of ``Invocations`` and of
    ``InvocationsPerInstance`` (each request counts 1 / the instances serving). In formula mode a period's point
    is stamped one period early, so the decision at a step's start reads that step's load."""

    def __init__(self, period_s: int, lookahead: bool) -> None:
        self.period_s = period_s
        self.lookahead = lookahead
        self.total: dict[float, float] = {}
        self.per_instance: dict[float, float] = {}

    def bucket(self, t: float) -> float:
        return math.floor(t / self.period_s) * self.period_s

    def record(self, t: float, requests: float, serving: int) -> None:
        b = self.bucket(t)
        self.total[b] = self.total.get(b, 0.0) + requests
        self.per_instance[b] = self.per_instance.get(b, 0.0) + requests / max(serving, 1)

    def datapoints(self, query: MetricQuery, start: float, end: float) -> list[tuple[float, float]]:
        series = {"InvocationsPerInstance": self.per_instance, "Invocations": self.total}.get(query.metric_name, {})
        shift = self.period_s if self.lookahead else 0.0
        return sorted((t - shift, v) for t, v in series.items() if start <= t - shift < end)


class _SimScaler(Autoscaler):
    """The control plane's Autoscaler; in formula mode its target-tracking alarms take one datapoint each and
    AlarmLow fires below the target itself (the seed's instant sizing). Nothing else differs."""

    instant = False

    def _tt_policy(self, p: dict[str, Any]) -> TargetTrackingPolicy | None:
        policy = super()._tt_policy(p)
        if policy is None or not self.instant:
            return policy
        return dataclasses.replace(policy, high_periods=1, low_periods=1, low_ratio=1.0)


class _Replay:
    def __init__(self, curve: Curve, fleet: Fleet, policy: Policy, step_s: int, start: float) -> None:
        self.curve, self.fleet, self.policy, self.step_s = curve, fleet, policy, step_s
        self.formula = policy.mode == "formula"
        if self.formula and fleet.startup_s > 0:
            raise SimError("formula mode has new instances serve at once: use --mode real with a start-up time")
        self.period = step_s if self.formula else policy.period_s
        self.tick_s = step_s if self.formula else min(policy.tick_s, self.period)
        if not self.formula and (step_s % self.tick_s and self.tick_s % step_s):
            raise SimError(f"the step ({step_s} s) and the scaler's tick ({self.tick_s} s) must divide one another")
        self.dt = math.gcd(step_s, self.tick_s, self.period)
        self.t0 = start
        self.clock = _Clock(start - 1.0)
        conn = sqlite3.connect(":memory:", isolation_level=None)
        migrate(conn, {autoscaling_state.AGGREGATE: autoscaling_state.MIGRATIONS})
        self.repo = Autoscaling(conn, self.clock)
        self.api = AutoscalingApi(self.repo, Account(), self.clock)
        self.endpoint = _Endpoint(policy.initial or policy.min_capacity, fleet.startup_s, self.clock)
        self.metrics = _Metrics(self.period, lookahead=self.formula)
        self.scaler = _SimScaler(self.repo, self.endpoint, self.metrics, self.clock, self.period, self.tick_s)
        self.scaler.instant = self.formula
        self.alarms: list[tuple[AlarmDefinition, str]] = []
        self.alarm_states: dict[str, AlarmState] = {}

    async def setup(self) -> None:
        p, h = self.policy, self.api.handlers()
        key = {"ServiceNamespace": NAMESPACE, "ResourceId": RESOURCE, "ScalableDimension": DIMENSION}
        try:
            await h["RegisterScalableTarget"]({**key, "MinCapacity": p.min_capacity, "MaxCapacity": p.max_capacity})
            if p.target_utilization is not None:
                await h["PutScalingPolicy"]({**key, "PolicyName": "target-tracking",
                    "PolicyType": "TargetTrackingScaling", "TargetTrackingScalingPolicyConfiguration": {
                        "TargetValue": self.fleet.capacity_rps * p.target_utilization * 60.0,
                        "PredefinedMetricSpecification": {"PredefinedMetricType": INVOCATIONS_PER_INSTANCE},
                        "ScaleOutCooldown": p.scale_out_cooldown_s, "ScaleInCooldown": p.scale_in_cooldown_s,
                        "DisableScaleIn": p.disable_scale_in}})  # fmt: skip
            for s in p.steps:
                out = await h["PutScalingPolicy"]({**key, "PolicyName": s.name, "PolicyType": "StepScaling",
                                                   "StepScalingPolicyConfiguration": dict(s.config)})  # fmt: skip
                self.alarms.append((self._alarm(s.name, dict(s.alarm), out["PolicyARN"]), out["PolicyARN"]))
            for a in p.scheduled:
                action = {k: v for k, v in (("MinCapacity", a.min_capacity), ("MaxCapacity", a.max_capacity))
                          if v is not None}  # fmt: skip
                await h["PutScheduledAction"]({**key, "ScheduledActionName": a.name, "Schedule": a.schedule,
                                               "Timezone": a.timezone, "ScalableTargetAction": action})  # fmt: skip
        except ApiError as exc:
            raise SimError(f"{exc.code}: {exc.message}") from None

    def _alarm(self, name: str, spec: dict[str, Any], arn: str) -> AlarmDefinition:
        params = {
            "AlarmName": f"what-if-{name}",
            "Namespace": "AWS/SageMaker",
            "MetricName": "InvocationsPerInstance",
            "Dimensions": [{"Name": "EndpointName", "Value": ENDPOINT}, {"Name": "VariantName", "Value": VARIANT}],
            "Statistic": "Sum",
            "Period": self.period,
            "EvaluationPeriods": 1,
            **spec,
            "AlarmActions": [arn],
        }
        try:
            return AlarmDefinition.from_params(params, resolution_s=self.period)
        except AlarmConfigError as exc:
            raise SimError(f"step policy {name}'s alarm: {exc}") from None

    def _run_alarms(self, now: float) -> None:
        """CloudWatch's evaluation of each step policy's alarm; in ALARM it runs the policy (again each period)."""
        for alarm, arn in self.alarms:
            start, end = alarm.window(now)
            points = self.metrics.datapoints(alarm.query(), start, end)
            before = self.alarm_states.get(alarm.name, AlarmState.INSUFFICIENT_DATA)
            ev = evaluate(alarm, points, before, now)
            self.alarm_states[alarm.name] = ev.state
            if ev.state is AlarmState.ALARM:
                recent = tuple(float(v) for v in ev.reason_data.get("recentDatapoints") or ())
                self.scaler.alarm_action(
                    AlarmAction(arn, alarm.name, ev.state, alarm.threshold, recent, now, before is AlarmState.ALARM)
                )

    async def _decide(self, now: float, rps: float) -> None:
        self.clock.now = now
        if self.formula:
            b = self.metrics.bucket(now)
            self.metrics.total[b] = rps * self.period
            self.metrics.per_instance[b] = rps * self.period / max(self.endpoint.serving, 1)
        if self.alarms and (now - self.t0) % self.period == 0:
            self._run_alarms(now)
        if (now - self.t0) % self.tick_s == 0:
            await self.scaler.tick()
            if self.formula and self.repo.scaler_state((NAMESPACE, RESOURCE, DIMENSION)).get("activity"):
                await self.scaler.tick()  # the change served at once: the scaler settles it at the same instant

    async def run(self) -> SimReport:
        await self.setup()
        f, p = self.fleet, self.policy
        rows: list[SimStep] = []
        queue = cumulative = 0.0
        seen = 0
        for time_s, rps in self.curve.steps(self.step_s):
            t_k = self.t0 + (time_s - self.curve.start)
            served = shed = offered_capacity = billed = 0.0
            for j in range(self.step_s // self.dt):
                now = t_k + j * self.dt
                await self._decide(now, rps)
                self.endpoint.advance()
                n = self.endpoint.serving
                capacity = n * f.capacity_rps * self.dt
                offered = rps * self.dt
                waiting = queue + offered
                done = min(waiting, capacity)
                left = waiting - done
                dropped = max(0.0, left - n * f.capacity_rps * f.max_queue_s)
                queue = left - dropped
                served, shed, offered_capacity = served + done, shed + dropped, offered_capacity + capacity
                billed += max(self.endpoint.desired, n) * self.dt
                if not self.formula:
                    self.metrics.record(now, offered, n)
            activities = self._scaled()
            fresh = list(reversed(activities[: len(activities) - seen]))
            seen = len(activities)
            events = tuple(f"{a['Description']} ({a['Cause']})" for a in fresh)
            n = self.endpoint.serving
            per_instance = rps / max(n, 1)
            wait_ms = queue / (n * f.capacity_rps) * 1000.0 if n else 0.0
            p99 = f.latency.p99_ms(per_instance, f.capacity_rps) + wait_ms
            instances = billed / self.step_s
            cost = instances * f.price_per_hour * self.step_s / 3600.0
            cumulative += cost
            target = p.target_utilization
            rows.append(SimStep(
                time_s=time_s, rps=rps, desired=self.endpoint.desired, serving=n,
                formula=None if target is None else formula_count(
                    rps, f.capacity_rps, target, p.min_capacity, p.max_capacity),
                utilization=rps * self.step_s / offered_capacity if offered_capacity else math.inf,
                served=served, queued=queue, shed=shed, p99_ms=p99, over_slo=p99 > f.slo_ms or shed > 0,
                cost=cost, cumulative_cost=cumulative, events=events,
            ))  # fmt: skip
        acts = tuple(self._activity(a) for a in reversed(self._scaled()))
        report = SimReport(
            p, f, float(self.step_s), self.curve.source, tuple(rows), (), acts, self.t0, self.curve.epoch
        )
        return dataclasses.replace(report, explanation=explain(report, self.period, self.tick_s))

    def _scaled(self) -> list[dict[str, Any]]:
        """The scaling activities, newest first, as DescribeScalingActivities lists them by default (an alarm that
        changed nothing is left out)."""
        return [a for a in self.repo.activities(NAMESPACE, RESOURCE) if not a.get("NotScaledReasons")]

    def _activity(self, a: dict[str, Any]) -> dict[str, Any]:
        return {
            "time_s": round(float(a["StartTime"]) - self.t0 + self.curve.start, 3),
            "description": a.get("Description"),
            "cause": a.get("Cause"),
            "status": a.get("StatusCode"),
        }


def explain(report: SimReport, period_s: int, tick_s: int) -> tuple[str, ...]:
    """What the replay assumed and, in real mode, where the fleet lagged the formula and why."""
    p, f = report.policy, report.fleet
    out: list[str] = []
    cooldowns = f"cooldowns: scale-out {p.scale_out_cooldown_s:g} s, scale-in {p.scale_in_cooldown_s:g} s"
    if p.mode == "formula":
        out.append(
            "formula mode: the control plane's Autoscaler and target-tracking decision evaluated once per "
            f"{report.step_s:g} s step on that step's own load (1-datapoint AlarmHigh/AlarmLow, no 90% dead band), "
            f"new instances serving at once, {cooldowns}; with cooldowns 0 this is N = ceil(rps / (capacity x "
            "target)) clamped to [min, max]"
        )
    else:
        out.append(
            f"real mode: the Autoscaler as servekit up runs it, looking every {tick_s} s at complete {period_s} s "
            "periods of InvocationsPerInstance; AlarmHigh needs 3 periods above the target, AlarmLow 15 periods "
            f"below 90% of it; {cooldowns}; a new instance serves {f.startup_s:g} s after it is asked for; a change "
            "is judged only on a period measured after it ended; no datapoints exist before the curve starts"
        )
        under, over = report.lag
        if p.target_utilization is not None and (under or over):
            out.append(
                f"lag: {under} step(s) asked for fewer instances than the formula's count and {over} for more, "
                "because of the alarm periods, cooldowns, start-up time and the dead band above"
            )
    if p.steps:
        out.append("step policies run from their CloudWatch alarms, evaluated once per period")
    if p.scheduled:
        out.append(f"scheduled actions fire on the clock: time_s 0 is {_iso(report)}")
    out.append(f"p99: {f.latency.label}, plus the wait of the queue; over the SLO: p99 > {f.slo_ms:g} ms or shedding")
    return tuple(out)


def _iso(report: SimReport) -> str:
    return datetime.fromtimestamp(report.start, UTC).isoformat()


def simulate(curve: Curve, fleet: Fleet, policy: Policy, step_s: int = 60, start: float = T0) -> SimReport:
    """Replay ``curve`` through ``policy`` on ``fleet``, one row per ``step_s`` (see the module)."""
    if step_s < 1 or int(step_s) != step_s:
        raise SimError(f"the step must be a whole number of seconds, at least 1, not {step_s}")
    return asyncio.run(_Replay(curve, fleet, policy, int(step_s), start).run())


def compare(curve: Curve, fleet: Fleet, policies: Sequence[Policy], step_s: int = 60) -> list[SimReport]:
    """Several scenarios on the same traffic, side by side."""
    return [simulate(curve, fleet, p, step_s) for p in policies]
