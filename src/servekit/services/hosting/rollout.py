"""Guarded deployments (UpdateEndpoint's ``DeploymentConfig``) as a plan and a pure step function.

A :class:`RolloutPolicy` is the plan: a list of :class:`TrafficStep` (the green fleet's share of the traffic, how
much of each fleet runs, how long to bake), a final bake, a time limit and the alarms that roll it back.
:func:`policy_from` builds it from SageMaker's ``DeploymentConfig`` (``shared/reference/anchors-hosting.md`` §1);
:func:`custom_policy` from any list of shares (the seed's 5% → 20% → 50% → 100%).

:func:`advance` is the decision: (policy, state, alarm states, now) → the next :class:`RolloutState`. It reads no
clock and touches no fleet; the fleet controller (``control.fleet``) applies what a state asks for (starts or
drains instances, publishes weights), tells the state it is applied (:func:`applied`), and calls ``advance`` again
on each poll. So the whole 5→20→50→100 plan, with an alarm in the middle, runs on a manual clock in a unit test.

The phases and their edges:

===============  ======================  ===============================================================
from             to                      when
===============  ======================  ===============================================================
(start)          Launching               UpdateEndpoint: the green fleet (a rolling update's first batch)
                                         starts while blue serves all traffic
Launching        ActivatingTraffic       every green instance of the first step is healthy (``launched``)
ActivatingTraffic ActivatingTraffic      the step's bake ended with no alarm: the next step (a new index)
ActivatingTraffic Baking                 the last step's bake ended: all traffic is on green
ActivatingTraffic RollingBack            an alarm is in ALARM, or MaximumExecutionTimeoutInSeconds passed
Baking           Deleting                TerminationWaitInSeconds passed with no alarm: blue is stopped
Baking           RollingBack             as above
Launching        RollingBack             MaximumExecutionTimeoutInSeconds passed while launching
Deleting         Done                    blue has stopped (``finished``)
RollingBack      RolledBack              blue takes all traffic again and green is stopped (``rolled_back``)
===============  ======================  ===============================================================

Alarms are watched while traffic is on green (ActivatingTraffic, Baking), as SageMaker checks them during every
bake; an alarm that covers both fleets and fires because of blue aborts too, as it does there.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from servekit.errors import IllegalTransition


class RolloutPhase(enum.StrEnum):
    LAUNCHING = "Launching"  # SageMaker's VariantStatus "Creating": green instances starting
    ACTIVATING = "ActivatingTraffic"  # a traffic step is live and baking
    BAKING = "Baking"  # all traffic on green; the final bake (TerminationWaitInSeconds)
    DELETING = "Deleting"  # blue is draining and stopping
    DONE = "Done"
    ROLLING_BACK = "RollingBack"
    ROLLED_BACK = "RolledBack"

    @property
    def final(self) -> bool:
        return self in (RolloutPhase.DONE, RolloutPhase.ROLLED_BACK)


_P = RolloutPhase
TRANSITIONS: dict[RolloutPhase, frozenset[RolloutPhase]] = {
    _P.LAUNCHING: frozenset({_P.ACTIVATING, _P.ROLLING_BACK}),
    _P.ACTIVATING: frozenset({_P.ACTIVATING, _P.BAKING, _P.ROLLING_BACK}),  # to itself: the next step
    _P.BAKING: frozenset({_P.DELETING, _P.ROLLING_BACK}),
    _P.DELETING: frozenset({_P.DONE}),
    _P.ROLLING_BACK: frozenset({_P.ROLLED_BACK}),
    _P.DONE: frozenset(),
    _P.ROLLED_BACK: frozenset(),
}


@dataclass(frozen=True, slots=True)
class TrafficStep:
    green_share: float  # the green fleet's share of the traffic, in (0, 1]
    bake_s: float  # how long the step runs, with alarms watched, before the next one
    green_fraction: float = 1.0  # of each green variant's instances, how many run (rolling: k batches of n)
    blue_fraction: float = 1.0  # of each blue variant's instances, how many still run


@dataclass(frozen=True, slots=True)
class RolloutPolicy:
    kind: str  # ALL_AT_ONCE | CANARY | LINEAR | ROLLING | CUSTOM
    steps: tuple[TrafficStep, ...]
    termination_wait_s: float = 0.0
    max_execution_s: float | None = None
    alarms: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.steps or self.steps[-1].green_share != 1.0:
            raise ValueError("a rollout's last step must put all traffic on the new fleet")
        shares = [s.green_share for s in self.steps]
        if any(not 0 < s <= 1 for s in shares) or shares != sorted(shares):
            raise ValueError(f"traffic shares must grow within (0, 1]: {shares}")


@dataclass(frozen=True, slots=True)
class RolloutState:
    phase: RolloutPhase
    started: float
    since: float  # when the current step (or phase) took effect
    step: int = 0  # index into policy.steps while ActivatingTraffic
    applied: bool = False  # whether the fleets already look as the current step asks
    reason: str = ""  # why it is rolling back

    def green_share(self, policy: RolloutPolicy) -> float:
        """The green fleet's share of traffic that this state asks the gateway for."""
        if self.phase in (_P.LAUNCHING, _P.ROLLING_BACK, _P.ROLLED_BACK):
            return 0.0
        if self.phase is _P.ACTIVATING:
            return policy.steps[self.step].green_share
        return 1.0

    def fractions(self, policy: RolloutPolicy) -> tuple[float, float]:
        """(green, blue): the share of each fleet's instances that should be running in this state."""
        if self.phase is _P.LAUNCHING:
            return policy.steps[0].green_fraction, 1.0
        if self.phase is _P.ACTIVATING:
            s = policy.steps[self.step]
            return s.green_fraction, s.blue_fraction
        if self.phase in (_P.ROLLING_BACK, _P.ROLLED_BACK):
            return 0.0, 1.0
        return 1.0, 0.0 if self.phase in (_P.DELETING, _P.DONE) else policy.steps[-1].blue_fraction


def _move(state: RolloutState, to: RolloutPhase, **changes: Any) -> RolloutState:
    if to not in TRANSITIONS[state.phase]:
        raise IllegalTransition(f"a rollout cannot go from {state.phase} to {to}")
    return replace(state, phase=to, **changes)


def start(now: float) -> RolloutState:
    return RolloutState(_P.LAUNCHING, started=now, since=now)


def launched(state: RolloutState, now: float) -> RolloutState:
    """The first step's green instances are healthy: its traffic shift is next (not yet applied)."""
    return _move(state, _P.ACTIVATING, step=0, since=now, applied=False)


def applied(state: RolloutState, now: float) -> RolloutState:
    """The fleets now look as ``state`` asks: its bake starts now."""
    return replace(state, applied=True, since=now)


def abort(state: RolloutState, now: float, reason: str) -> RolloutState:
    """The controller could not do what a step asks (the new fleet did not grow): roll back."""
    return _move(state, _P.ROLLING_BACK, since=now, reason=reason)


def finished(state: RolloutState, now: float) -> RolloutState:
    return _move(state, _P.DONE, since=now)


def rolled_back(state: RolloutState, now: float) -> RolloutState:
    return _move(state, _P.ROLLED_BACK, since=now)


def advance(policy: RolloutPolicy, state: RolloutState, alarms: Mapping[str, str], now: float) -> RolloutState:
    """The state after ``state`` at ``now`` given the alarms' states (name → OK | ALARM | INSUFFICIENT_DATA).
    Launching, an unapplied step, Deleting and RollingBack wait for the controller; final states stay."""
    if state.phase.final or state.phase in (_P.DELETING, _P.ROLLING_BACK):
        return state
    if policy.max_execution_s is not None and now - state.started >= policy.max_execution_s:
        return _move(
            state,
            _P.ROLLING_BACK,
            since=now,
            reason=f"The deployment did not finish within MaximumExecutionTimeoutInSeconds "
            f"({policy.max_execution_s:.0f} s).",
        )
    if state.phase is _P.LAUNCHING or not state.applied:
        return state
    firing = [a for a in policy.alarms if alarms.get(a) == "ALARM"]
    if firing:
        step = f" at {state.green_share(policy):.0%} of traffic" if state.phase is _P.ACTIVATING else ""
        names = ", ".join(firing)
        return _move(
            state,
            _P.ROLLING_BACK,
            since=now,
            reason=f"Rolled back: alarm {names} went into ALARM during the deployment{step}; "
            "all traffic is back on the previous endpoint configuration.",
        )
    if state.phase is _P.ACTIVATING:
        if now - state.since < policy.steps[state.step].bake_s:
            return state
        if state.step + 1 < len(policy.steps):
            return _move(state, _P.ACTIVATING, step=state.step + 1, since=now, applied=False)
        return _move(state, _P.BAKING, since=now, applied=True)
    # Baking: the final bake with all traffic on green
    if now - state.since < policy.termination_wait_s:
        return state
    return _move(state, _P.DELETING, since=now, applied=False)


def next_change_s(policy: RolloutPolicy, state: RolloutState, now: float) -> float | None:
    """Seconds until the clock alone would change ``state`` (a bake or the time limit ending); None if never.
    Alarms may change it sooner: the controller polls them more often than this."""
    due: list[float] = []
    if policy.max_execution_s is not None and not state.phase.final:
        due.append(state.started + policy.max_execution_s)
    if state.applied and state.phase is _P.ACTIVATING:
        due.append(state.since + policy.steps[state.step].bake_s)
    if state.phase is _P.BAKING:
        due.append(state.since + policy.termination_wait_s)
    return max(0.0, min(due) - now) if due else None


def describe(policy: RolloutPolicy, state: RolloutState, green_instances: int) -> tuple[str, str]:
    """SageMaker's VariantStatus (Status, StatusMessage) for the green fleet in ``state``."""
    if state.phase is _P.LAUNCHING:
        return "Creating", f"Launching {green_instances} instance(s)."
    if state.phase is _P.ACTIVATING:
        share = policy.steps[state.step].green_share
        return (
            "ActivatingTraffic",
            f"Step {state.step + 1} of {len(policy.steps)}: {share:.0%} of traffic on the new fleet, baking for "
            f"{policy.steps[state.step].bake_s:.0f} seconds.",
        )
    if state.phase is _P.BAKING:
        return (
            "Baking",
            f"Baking for {policy.termination_wait_s:.0f} seconds (TerminationWaitInSeconds) with traffic enabled on "
            f"full capacity of {green_instances} instance(s).",
        )
    if state.phase is _P.DELETING:
        return "Deleting", "Terminating the previous fleet."
    if state.phase is _P.ROLLING_BACK:
        return "Deleting", state.reason
    return str(state.phase), state.reason


# ---- SageMaker's DeploymentConfig -------------------------------------------------------------------------------
# Limits from the SageMaker developer guide (deployment-guardrails-*): canary at most half the fleet, linear steps of
# 10-50%, rolling batches of 5-50%; botocore checks none of them, so the server does.
_LIMITS = {"CANARY": (1, 50), "LINEAR": (10, 50), "ROLLING": (5, 50)}


def _fraction(size: Mapping[str, Any] | None, instances: int, what: str, kind: str) -> float:
    if not size:
        raise ValueError(f"{what} is required for a {kind} deployment.")
    unit, value = size.get("Type"), size.get("Value")
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{what}.Value must be an integer of at least 1.")
    lo, hi = _LIMITS[kind]
    if unit == "CAPACITY_PERCENT":
        if not lo <= value <= hi:
            raise ValueError(f"{what} must be between {lo}% and {hi}% of capacity for a {kind} deployment.")
        return value / 100
    if unit == "INSTANCE_COUNT":
        if value * 100 > hi * max(instances, 1):
            raise ValueError(
                f"{what} of {value} instance(s) is more than {hi}% of the {instances} instance(s) of the new fleet."
            )
        return value / max(instances, 1)
    raise ValueError(f"{what}.Type must be INSTANCE_COUNT or CAPACITY_PERCENT, not {unit}.")


def policy_from(config: Mapping[str, Any] | None, green_instances: int) -> RolloutPolicy:
    """The plan of an UpdateEndpoint ``DeploymentConfig`` (None: blue/green, all at once, no bake), for a new
    fleet of ``green_instances`` instances. ValueError with SageMaker-style wording for what it refuses.

    Traffic shares are exact weights: servekit's gateway routes by weight, so a 5% canary gets 5% of the requests
    even when the new fleet has one instance (SageMaker turns on whole instances)."""
    config = config or {}
    alarms = tuple(a["AlarmName"] for a in (config.get("AutoRollbackConfiguration") or {}).get("Alarms") or [])
    blue_green, rolling = config.get("BlueGreenUpdatePolicy"), config.get("RollingUpdatePolicy")
    if blue_green and rolling:
        raise ValueError("Specify either BlueGreenUpdatePolicy or RollingUpdatePolicy, not both.")
    if rolling:
        batch = _fraction(rolling.get("MaximumBatchSize"), green_instances, "MaximumBatchSize", "ROLLING")
        wait = float(rolling.get("WaitIntervalInSeconds", 0))
        batches = math.ceil(1 / batch - 1e-9)
        shares = [min(1.0, k * batch) for k in range(1, batches + 1)]
        rolling_steps = tuple(TrafficStep(g, wait, green_fraction=g, blue_fraction=max(0.0, 1.0 - g)) for g in shares)
        return RolloutPolicy("ROLLING", rolling_steps, 0.0, _max_s(rolling), alarms)
    if not blue_green:
        return RolloutPolicy("ALL_AT_ONCE", (TrafficStep(1.0, 0.0),), 0.0, None, alarms)
    routing = blue_green.get("TrafficRoutingConfiguration") or {}
    kind = routing.get("Type", "ALL_AT_ONCE")
    wait = float(routing.get("WaitIntervalInSeconds", 0))
    steps: tuple[TrafficStep, ...]
    if kind == "ALL_AT_ONCE":
        steps = (TrafficStep(1.0, wait),)
    elif kind == "CANARY":
        canary = _fraction(routing.get("CanarySize"), green_instances, "CanarySize", "CANARY")
        steps = (TrafficStep(canary, wait), TrafficStep(1.0, 0.0))
    elif kind == "LINEAR":
        step = _fraction(routing.get("LinearStepSize"), green_instances, "LinearStepSize", "LINEAR")
        count = math.ceil(1 / step - 1e-9)
        steps = tuple(TrafficStep(min(1.0, (k + 1) * step), wait) for k in range(count))
    else:
        raise ValueError(f"TrafficRoutingConfiguration.Type must be ALL_AT_ONCE, CANARY or LINEAR, not {kind}.")
    termination = float(blue_green.get("TerminationWaitInSeconds", 0))
    max_s = _max_s(blue_green)
    if max_s is not None and max_s <= sum(s.bake_s for s in steps) + termination:
        raise ValueError(
            "MaximumExecutionTimeoutInSeconds must be greater than the sum of all wait intervals and "
            "TerminationWaitInSeconds."
        )
    return RolloutPolicy(kind, steps, termination, max_s, alarms)


def _max_s(policy: Mapping[str, Any]) -> float | None:
    value = policy.get("MaximumExecutionTimeoutInSeconds")
    return None if value is None else float(value)


def custom_policy(
    shares_percent: Sequence[float],
    wait_s: float,
    termination_wait_s: float = 0.0,
    alarms: Sequence[str] = (),
    max_execution_s: float | None = None,
) -> RolloutPolicy:
    """Blue/green over any increasing list of traffic percentages ending at 100 (e.g. 5, 20, 50, 100)."""
    steps = tuple(TrafficStep(p / 100, wait_s) for p in shares_percent)
    return RolloutPolicy("CUSTOM", steps, termination_wait_s, max_execution_s, tuple(alarms))
