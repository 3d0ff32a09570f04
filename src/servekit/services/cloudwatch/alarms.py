"""CloudWatch's alarm operations (PutMetricAlarm, DescribeAlarms, DeleteAlarms, SetAlarmState,
DescribeAlarmHistory), the evaluator that moves alarms between states, and their actions.

:class:`AlarmService` answers the operations (``handlers()``, registered as ``services={"cloudwatch": ...}``
on :class:`~servekit.edge.plane.ControlPlane`) and, once started, evaluates every alarm each
``min(Period, 60, the metrics resolution)`` seconds (or every ``interval_s``) against a
:class:`~servekit.services.cloudwatch.source.MetricSource` with the pure
:func:`~servekit.services.cloudwatch.evaluation.evaluate`. A state change (by evaluation or SetAlarmState, which holds
only until
the next evaluation, as in CloudWatch) is stored with its history row and runs the actions for the new state:

- an ``http(s)://`` URL, servekit's stand-in for an SNS topic, gets a POST of the JSON message CloudWatch
  publishes to SNS (``AlarmName``, ``NewStateValue``, ``OldStateValue``, ``NewStateReason``,
  ``StateChangeTime``, ``Trigger``…) from a background task with bounded retries: evaluation never waits on it;
- an ARN whose prefix has a handler in ``action_handlers`` (``arn:aws:autoscaling:`` → the autoscaler's step
  policies, wired by ``servekit up``) is handed an :class:`AlarmAction` at once (handlers only queue work: the
  evaluation never waits), and, as CloudWatch does for Auto Scaling actions, again at each evaluation while the
  alarm stays in the state;
- any other ARN (``arn:aws:sns:…``) is recorded in the history and skipped with a log line.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson

from servekit._utils.background import BackgroundLoop
from servekit.aws.errors import ApiError
from servekit.aws.front import Handler
from servekit.aws.names import Account
from servekit.aws.timestamps import optional_epoch
from servekit.services.cloudwatch.alarm_store import AlarmRow, Alarms, HistoryRow, InvalidNextToken
from servekit.services.cloudwatch.evaluation import AlarmConfigError, AlarmDefinition, AlarmState, evaluate, iso_time
from servekit.services.cloudwatch.source import MetricQuery, MetricSource

log = logging.getLogger(__name__)

HISTORY_RETENTION_S = 14 * 86_400
_MANAGED_BY = "ServekitManagedBy"  # in a managed alarm's stored definition (never described): who keeps it
_REGION_NAMES = {"us-east-1": "US East (N. Virginia)", "us-west-2": "US West (Oregon)", "eu-west-1": "EU (Ireland)"}


@dataclass(frozen=True, slots=True)
class AlarmAction:
    """An ARN action an alarm runs, as its handler sees it."""

    action: str  # the ARN listed in the alarm's actions
    alarm_name: str
    state: AlarmState
    threshold: float
    datapoints: tuple[float, ...]  # the evaluated values, oldest first; empty after SetAlarmState
    at: float
    repeat: bool  # the alarm stayed in the state (not a transition)


ActionHandler = Callable[[AlarmAction], None]


class NoMetrics:
    """A :class:`MetricSource` with no data (every alarm then follows its TreatMissingData)."""

    def datapoints(self, query: MetricQuery, start: float, end: float) -> list[tuple[float, float]]:
        return []


def _error(code: str, message: str) -> ApiError:
    return ApiError(code, message, None)  # modeled: the status comes from the service model


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


class WebhookNotifier:
    """POSTs alarm notifications to http(s) URLs from background tasks: ``attempts`` tries with doubling
    ``backoff_s`` between them; ``on_result(url, message, error)`` reports each delivery (error None on success).
    At most ``max_pending`` deliveries are in flight; more are dropped with a log line rather than queued."""

    def __init__(
        self,
        on_result: Callable[[str, Mapping[str, Any], str | None], None] | None = None,
        attempts: int = 3,
        backoff_s: float = 0.5,
        timeout_s: float = 5.0,
        max_pending: int = 256,
    ) -> None:
        self._on_result = on_result
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._timeout_s = timeout_s
        self._max_pending = max_pending
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None

    def submit(self, url: str, message: Mapping[str, Any]) -> bool:
        """Start delivering ``message`` to ``url``; returns at once (needs a running event loop). False: dropped,
        ``max_pending`` deliveries being in flight (``on_result`` is then not called)."""
        if len(self._tasks) >= self._max_pending:
            log.warning("notification to %s dropped: %d deliveries already pending", url, len(self._tasks))
            return False
        task = asyncio.get_running_loop().create_task(self._deliver(url, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _deliver(self, url: str, message: Mapping[str, Any]) -> None:
        body = orjson.dumps(dict(message))
        error: str | None = None
        for attempt in range(self._attempts):
            if attempt:
                await asyncio.sleep(self._backoff_s * 2 ** (attempt - 1))
            try:
                session = self._client()
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    if r.status < 300:
                        error = None
                        break
                    error = f"HTTP {r.status}"
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                error = f"{type(exc).__name__}: {exc}"
        if error is not None:
            log.warning("alarm notification to %s failed after %d attempts: %s", url, self._attempts, error)
        if self._on_result is not None:
            try:
                self._on_result(url, message, error)
            except Exception:
                log.exception("recording an alarm notification failed")

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        return self._session

    async def drain(self) -> None:
        """Wait for the deliveries in flight (tests; shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._session is not None:
            await self._session.close()


class AlarmService(BackgroundLoop):
    """The alarm operations and the evaluator. ``clock`` is seconds since the epoch (injectable, as is the
    repository's); ``interval_s`` evaluates every alarm that often instead of each ``min(Period, 60,
    resolution_s)``. ``resolution_s``: the metric source's resolution; a finer one than a minute allows alarm
    periods that are multiples of it and evaluates that often, so short periods are judged as soon as they end."""

    def __init__(
        self,
        repo: Alarms,
        source: MetricSource,
        account: Account | None = None,
        clock: Callable[[], float] = time.time,
        interval_s: float | None = None,
        tick_s: float = 1.0,
        notifier: WebhookNotifier | None = None,
        action_handlers: Mapping[str, ActionHandler] | None = None,
        resolution_s: int = 60,
    ) -> None:
        self.repo = repo
        self.resolution_s = resolution_s
        # ARN prefix -> handler (e.g. "arn:aws:autoscaling:" -> the autoscaler's step policies)
        self.action_handlers: dict[str, ActionHandler] = dict(action_handlers or {})
        self.source = source
        self.account = account or Account()
        self.clock = clock
        self.interval_s = interval_s
        self.tick_s = tick_s
        self.notifier = notifier or WebhookNotifier(self._record_delivery)
        self._last_evaluated: dict[str, float] = {}
        # SetAlarmState's state holds for one period of the alarm: evaluating at servekit's faster cadence would
        # otherwise undo it within a second, before a rollout watching the alarm has looked (a drill, or the
        # console's stop-a-rollout, would then do nothing)
        self._held_until: dict[str, float] = {}
        self._definitions: dict[str, tuple[float, AlarmDefinition]] = {}

    def handlers(self) -> dict[str, Handler]:
        return {
            "PutMetricAlarm": self.put_metric_alarm,
            "DescribeAlarms": self.describe_alarms,
            "DeleteAlarms": self.delete_alarms,
            "SetAlarmState": self.set_alarm_state,
            "DescribeAlarmHistory": self.describe_alarm_history,
        }

    def arn(self, name: str) -> str:
        a = self.account
        return f"arn:{a.partition}:cloudwatch:{a.region}:{a.account_id}:alarm:{name}"

    # ---- operations ------------------------------------------------------------------------------------------
    async def put_metric_alarm(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            definition = AlarmDefinition.from_params(p, self.resolution_s)
        except AlarmConfigError as exc:
            raise _error(exc.code, exc.message) from None
        doc = {k: v for k, v in p.items() if v is not None and k != "Tags"}
        self.repo.put(definition.name, definition.namespace, definition.metric_name, doc)
        self._definitions.pop(definition.name, None)
        return {}

    async def describe_alarms(self, p: dict[str, Any]) -> dict[str, Any]:
        types = p.get("AlarmTypes")
        if p.get("ChildrenOfAlarmName") or p.get("ParentsOfAlarmName") or (types and "MetricAlarm" not in types):
            return {"MetricAlarms": [], "CompositeAlarms": []}  # servekit has no composite alarms
        if p.get("ActionPrefix"):
            raise _error("InvalidParameterValueException", "servekit does not filter alarms by ActionPrefix yet.")
        max_records = int(p.get("MaxRecords") or 50)
        if not 1 <= max_records <= 100:
            raise _error("InvalidParameterValueException", "MaxRecords must be between 1 and 100.")
        names = p.get("AlarmNames")
        if names is not None and p.get("AlarmNamePrefix"):
            raise _error(
                "InvalidParameterCombinationException", "AlarmNames and AlarmNamePrefix cannot be used together."
            )
        try:
            page = self.repo.listing(
                names=names, prefix=p.get("AlarmNamePrefix"), state=p.get("StateValue"),
                max_records=max_records, next_token=p.get("NextToken"),
            )  # fmt: skip
        except InvalidNextToken as exc:
            raise _error("InvalidNextToken", str(exc)) from None
        out: dict[str, Any] = {"MetricAlarms": [self._describe(r) for r in page.items], "CompositeAlarms": []}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    def _describe(self, row: AlarmRow) -> dict[str, Any]:
        d = row.definition
        out: dict[str, Any] = {
            "AlarmName": row.name,
            "AlarmArn": self.arn(row.name),
            "AlarmConfigurationUpdatedTimestamp": _dt(row.config_updated),
            "ActionsEnabled": d.get("ActionsEnabled", True),
            "OKActions": d.get("OKActions", []),
            "AlarmActions": d.get("AlarmActions", []),
            "InsufficientDataActions": d.get("InsufficientDataActions", []),
            "StateValue": row.state_value,
            "StateReason": row.state_reason,
            "StateUpdatedTimestamp": _dt(row.state_updated),
            "StateTransitionedTimestamp": _dt(row.state_transitioned),
            "MetricName": row.metric_name,
            "Namespace": row.namespace,
            "Dimensions": d.get("Dimensions", []),
            "Period": d["Period"],
            "EvaluationPeriods": d["EvaluationPeriods"],
            "DatapointsToAlarm": d.get("DatapointsToAlarm", d["EvaluationPeriods"]),
            "Threshold": d["Threshold"],
            "ComparisonOperator": d["ComparisonOperator"],
            "TreatMissingData": d.get("TreatMissingData", "missing"),
            "EvaluationState": None,
        }
        for key in ("AlarmDescription", "Statistic", "ExtendedStatistic", "Unit", "EvaluateLowSampleCountPercentile"):
            if key in d:
                out[key] = d[key]
        if row.state_reason_data is not None:
            out["StateReasonData"] = row.state_reason_data
        return {k: v for k, v in out.items() if v is not None}

    def sync_managed(self, owner: str, wanted: Mapping[str, Mapping[str, Any]]) -> None:
        """Make the alarms ``owner`` manages (e.g. the autoscaler's target-tracking alarms) exactly ``wanted``
        (name -> PutMetricAlarm input): create or update the ones that differ, delete the ones no longer wanted.
        Each is marked with its owner, so a user's alarm of a similar name is never touched."""
        mine = {r.name: r for r in self.repo.all() if r.definition.get(_MANAGED_BY) == owner}
        for name, params in wanted.items():
            doc = {**params, _MANAGED_BY: owner}
            row = mine.get(name)
            if row is not None and row.definition == doc:
                continue
            try:
                definition = AlarmDefinition.from_params(doc, self.resolution_s)
            except AlarmConfigError as exc:
                log.warning("managed alarm %s cannot be created: %s", name, exc.message)
                continue
            self.repo.put(name, definition.namespace, definition.metric_name, doc)
            self._definitions.pop(name, None)
        gone = [name for name in mine if name not in wanted]
        if gone:
            self.repo.delete(gone)
            for name in gone:
                self._forget(name)

    def _forget(self, name: str) -> None:
        self._definitions.pop(name, None)
        self._last_evaluated.pop(name, None)
        self._held_until.pop(name, None)

    async def delete_alarms(self, p: dict[str, Any]) -> dict[str, Any]:
        names = list(p.get("AlarmNames") or [])
        missing = self.repo.delete(names)
        if missing:
            raise _error("ResourceNotFound", f"Alarm(s) {', '.join(missing)} not found; none were deleted.")
        for name in names:
            self._forget(name)
        return {}

    async def set_alarm_state(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["AlarmName"]
        value = p["StateValue"]
        if value not in tuple(AlarmState):
            raise _error("InvalidParameterValueException", f"Invalid value {value!r} for StateValue.")
        reason_data = p.get("StateReasonData")
        if reason_data is not None:
            try:
                orjson.loads(reason_data)
            except orjson.JSONDecodeError:
                raise _error("InvalidFormatFault", "StateReasonData is not valid JSON.") from None
        row = self.repo.get(name)
        if row is None:
            raise _error("ResourceNotFound", f"Alarm {name} not found")
        now = self.clock()
        self._change(row, AlarmState(value), p["StateReason"], reason_data, now)
        try:
            self._held_until[name] = now + self.definition(row).period_s
        except AlarmConfigError:
            pass  # never evaluated: nothing to hold it against
        return {}

    async def describe_alarm_history(self, p: dict[str, Any]) -> dict[str, Any]:
        types = p.get("AlarmTypes")
        if types and "MetricAlarm" not in types:
            return {"AlarmHistoryItems": []}
        max_records = int(p.get("MaxRecords") or 100)
        if not 1 <= max_records <= 100:
            raise _error("InvalidParameterValueException", "MaxRecords must be between 1 and 100.")
        scan = p.get("ScanBy") or "TimestampDescending"
        try:
            page = self.repo.history(
                name=p.get("AlarmName"), item_type=p.get("HistoryItemType"),
                start=optional_epoch(p.get("StartDate")), end=optional_epoch(p.get("EndDate")), max_records=max_records,
                next_token=p.get("NextToken"), newest_first=scan != "TimestampAscending",
            )  # fmt: skip
        except InvalidNextToken as exc:
            raise _error("InvalidNextToken", str(exc)) from None
        out: dict[str, Any] = {"AlarmHistoryItems": [self._history_item(h) for h in page.items]}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    @staticmethod
    def _history_item(h: HistoryRow) -> dict[str, Any]:
        return {
            "AlarmName": h.alarm_name,
            "AlarmType": "MetricAlarm",
            "Timestamp": _dt(h.timestamp),
            "HistoryItemType": h.item_type,
            "HistorySummary": h.summary,
            "HistoryData": h.data,
        }

    # ---- evaluation ------------------------------------------------------------------------------------------
    def definition(self, row: AlarmRow) -> AlarmDefinition:
        cached = self._definitions.get(row.name)
        if cached is not None and cached[0] == row.config_updated:
            return cached[1]
        # checked when it was put; a restart with a coarser resolution leaves it without datapoints, not broken
        definition = AlarmDefinition.from_params(row.definition, resolution_s=1)
        self._definitions[row.name] = (row.config_updated, definition)
        return definition

    def evaluate_due(self, now: float | None = None) -> list[tuple[str, AlarmState, AlarmState]]:
        """Evaluate every alarm whose interval has passed; answers the changes as (name, old, new)."""
        now = self.clock() if now is None else now
        changes: list[tuple[str, AlarmState, AlarmState]] = []
        for row in self.repo.all():
            try:
                definition = self.definition(row)
            except AlarmConfigError:
                log.exception("alarm %s has a definition servekit cannot evaluate", row.name)
                continue
            interval = self.interval_s or min(definition.period_s, 60, max(1, self.resolution_s))
            last = self._last_evaluated.get(row.name)
            if last is not None and now < last + interval:
                continue
            if now < self._held_until.get(row.name, now):
                continue
            self._last_evaluated[row.name] = now
            change = self.evaluate_alarm(row, definition, now)
            if change is not None:
                changes.append(change)
        return changes

    def evaluate_alarm(
        self, row: AlarmRow, definition: AlarmDefinition, now: float
    ) -> tuple[str, AlarmState, AlarmState] | None:
        start, end = definition.window(now)
        try:
            points = self.source.datapoints(definition.query(), start, end)
        except Exception:
            log.exception("reading metric %s for alarm %s failed", definition.metric_name, row.name)
            return None
        current = AlarmState(row.state_value)
        result = evaluate(definition, points, current, now)
        if result.state is current:
            self._repeat_actions(row.name, definition, current, result.reason_data, now)
            return None
        reason_data = orjson.dumps(result.reason_data).decode()
        if not self._change(row, result.state, result.reason, reason_data, now, expected=current):
            return None
        return row.name, current, result.state

    def _change(
        self,
        row: AlarmRow,
        new: AlarmState,
        reason: str,
        reason_data: str | None,
        now: float,
        expected: AlarmState | None = None,
    ) -> bool:
        old = self.repo.set_state(row.name, str(new), reason, reason_data, expected=expected, at=now)
        if old is None or old.state_value == str(new):
            return False
        try:
            definition = self.definition(old)
        except AlarmConfigError:
            return True
        actions = definition.actions_for(new)
        if actions:
            message = self.notification(old, definition, AlarmState(old.state_value), new, reason, now)
            data = orjson.loads(reason_data) if reason_data else None
            for action in actions:
                if self._hand_over(action, row.name, definition, new, data if isinstance(data, dict) else None,
                                   now, repeat=False):  # fmt: skip
                    self.repo.add_history(row.name, "Action", f"Successfully executed action {action}", {
                        "actionState": "Succeeded", "notificationResource": action,
                        "stateUpdateTimestamp": message["StateChangeTime"],
                    })  # fmt: skip
                    continue
                self._run_action(row.name, action, message)
        return True

    def _handler(self, action: str) -> ActionHandler | None:
        return next((h for prefix, h in self.action_handlers.items() if action.startswith(prefix)), None)

    def _hand_over(
        self, action: str, name: str, definition: AlarmDefinition, state: AlarmState,
        reason_data: Mapping[str, Any] | None, now: float, repeat: bool,
    ) -> bool:  # fmt: skip
        handler = self._handler(action)
        if handler is None:
            return False
        points = tuple(float(v) for v in (reason_data or {}).get("recentDatapoints") or ())
        try:
            handler(AlarmAction(action, name, state, definition.threshold, points, now, repeat))
        except Exception:
            log.exception("alarm %s: action %s failed", name, action)
        return True

    def _repeat_actions(
        self, name: str, definition: AlarmDefinition, state: AlarmState, reason_data: Mapping[str, Any], now: float
    ) -> None:
        """CloudWatch keeps invoking Auto Scaling actions while the alarm stays in the state (not webhooks)."""
        for action in definition.actions_for(state):
            self._hand_over(action, name, definition, state, reason_data, now, repeat=True)

    def _run_action(self, name: str, action: str, message: Mapping[str, Any]) -> None:
        if action.startswith(("http://", "https://")):
            try:
                self.notifier.submit(action, message)
            except RuntimeError:  # no running loop: a synchronous caller (tests of evaluation alone)
                log.warning("alarm %s: no event loop to notify %s", name, action)
            return
        log.info("alarm %s: action %s skipped: servekit runs only http(s) URL actions", name, action)
        self.repo.add_history(name, "Action", f"Skipped action {action}: servekit runs only http(s) URL actions", {
            "actionState": "Skipped", "notificationResource": action,
            "stateUpdateTimestamp": message["StateChangeTime"],
        })  # fmt: skip

    def _record_delivery(self, url: str, message: Mapping[str, Any], error: str | None) -> None:
        name = str(message["AlarmName"])
        if error is None:
            self.repo.add_history(name, "Action", f"Published a notification to {url}", {
                "actionState": "Succeeded", "notificationResource": url,
                "stateUpdateTimestamp": message["StateChangeTime"],
            })  # fmt: skip
        else:
            self.repo.add_history(name, "Action", f"Failed to publish a notification to {url}", {
                "actionState": "Failed", "notificationResource": url, "error": error,
                "stateUpdateTimestamp": message["StateChangeTime"],
            })  # fmt: skip

    def notification(
        self,
        row: AlarmRow,
        definition: AlarmDefinition,
        old: AlarmState,
        new: AlarmState,
        reason: str,
        at: float,
    ) -> dict[str, Any]:
        """The JSON CloudWatch publishes to an SNS topic on a state change."""
        d = row.definition
        trigger: dict[str, Any] = {
            "MetricName": definition.metric_name,
            "Namespace": definition.namespace,
            "StatisticType": "ExtendedStatistic" if definition.extended else "Statistic",
            "Unit": d.get("Unit"),
            "Dimensions": [{"value": v, "name": k} for k, v in definition.dimensions],
            "Period": definition.period_s,
            "EvaluationPeriods": definition.evaluation_periods,
            "DatapointsToAlarm": definition.datapoints_to_alarm,
            "ComparisonOperator": str(definition.comparison),
            "Threshold": definition.threshold,
            "TreatMissingData": definition.treat_missing_data,
            "EvaluateLowSampleCountPercentile": d.get("EvaluateLowSampleCountPercentile", ""),
        }
        if definition.extended:
            trigger["ExtendedStatistic"] = definition.statistic
        else:
            trigger["Statistic"] = definition.statistic.upper()
        return {
            "AlarmName": row.name,
            "AlarmDescription": d.get("AlarmDescription"),
            "AWSAccountId": self.account.account_id,
            "AlarmConfigurationUpdatedTimestamp": iso_time(row.config_updated),
            "NewStateValue": str(new),
            "NewStateReason": reason,
            "StateChangeTime": iso_time(at),
            "Region": _REGION_NAMES.get(self.account.region, self.account.region),
            "AlarmArn": self.arn(row.name),
            "OldStateValue": str(old),
            "OKActions": list(definition.ok_actions),
            "AlarmActions": list(definition.alarm_actions),
            "InsufficientDataActions": list(definition.insufficient_data_actions),
            "Trigger": trigger,
        }

    # ---- lifecycle -------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Evaluate in the background (``start()``, with a running event loop)."""
        next_prune = 0.0
        while True:
            try:
                now = self.clock()
                self.evaluate_due(now)
                if now >= next_prune:
                    self.repo.prune_history(now - HISTORY_RETENTION_S)
                    next_prune = now + 3600
            except Exception:
                log.exception("evaluating alarms failed")
            await asyncio.sleep(self._sleep_s())

    def _sleep_s(self) -> float:
        return self.tick_s if math.isfinite(self.tick_s) and self.tick_s > 0 else 1.0

    async def close(self) -> None:
        await super().close()
        await self.notifier.close()
