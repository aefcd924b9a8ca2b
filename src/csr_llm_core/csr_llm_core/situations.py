"""Situation lines from the robot's own sensing (plain module, no rclpy).

``SituationMonitor`` takes typed samples of the robot's own topics and returns the ``SensedLine``s
due, each stamped with its sample's sensor time:

* ``RangeSample`` (``proximity``, sensor_msgs/Range): person approaching / close / moving away / gone;
* ``WrenchSample`` (``gripper/wrench``) with the router's running task: object gripped / dropped /
  released; a pick task done with the grip held: object lifted;
* ``ZoneSample`` (``zone``, std_msgs/String): arrived in a zone;
* ``TemperatureSample`` (``motor_temperature``, one motor each): heating up / above the limit / cooled;
* ``RouterSample`` (``router_status``): slipping / back on grip (the router compares IMU and wheels),
  sub-task and task done or failed; the open_door task's end says the door is open.

Thresholds, hysteresis, rates and wording come from ``SituationsConfig`` (config/situations.yaml).
Impossible readings (``csr_llm_common.plausibility``, the bounds the router applies) never produce
a line: they are counted in ``faults`` and change nothing. The aggregator node turns each line into
an event chunk on the ``sensed`` source (``Aggregator.on_sensed``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Union

from csr_llm_common.faults import FaultLog
from csr_llm_common.plausibility import (MAX_NAMES, Refusal, bounded_name, range_refusal, temperature_refusal,
                                         wrench_refusal)

from .situation_detectors import (GripDetector, ProximityDetector, SensedLine, SlipDetector, TemperatureDetector,
                                  ZoneDetector)
from .situations_config import SituationsConfig
from .task_situations import ReflexDetector, RouterSample, TaskDetector

__all__ = ["RangeSample", "RouterSample", "SensedLine", "SituationMonitor", "TemperatureSample", "WrenchSample",
           "ZoneSample"]


MAX_REFLEXES = 8      # reflex names read from one report (the router nests a handful at most)

@dataclass(frozen=True)
class RangeSample:
    stamp: float
    distance: float                    # m; +inf: nothing in range, -inf: closer than min_range (REP 117)
    min_range: float = math.nan
    max_range: float = math.nan


@dataclass(frozen=True)
class WrenchSample:
    stamp: float
    force: Sequence[float]
    torque: Sequence[float] = ()


@dataclass(frozen=True)
class TemperatureSample:
    stamp: float
    celsius: float
    motor: str


@dataclass(frozen=True)
class ZoneSample:
    stamp: float
    zone: str


@dataclass(frozen=True)
class RouterReport:
    stamp: float
    status: RouterSample


Sample = Union[RangeSample, WrenchSample, TemperatureSample, ZoneSample, RouterReport]


class SituationMonitor:
    """The situation detectors behind one ``take(sample)``."""

    def __init__(self, config: Optional[SituationsConfig] = None, faults: Optional[FaultLog] = None):
        self.config = config if config is not None else SituationsConfig()
        self.faults = faults if faults is not None else FaultLog()
        self.proximity = ProximityDetector(self.config.proximity)
        self.grip = GripDetector(self.config.grip)
        self.zone = ZoneDetector(self.config.zone)
        self.temperature = TemperatureDetector(self.config.temperature, MAX_NAMES)
        self.slip = SlipDetector(self.config.slip)
        self.tasks = TaskDetector(self.config.tasks)
        self.reflexes = ReflexDetector(self.config.reflexes)
        self._takers: Dict[type, Callable] = {
            RangeSample: self._range, WrenchSample: self._wrench, TemperatureSample: self._temperature,
            ZoneSample: self._zone, RouterReport: self._router}

    def take(self, sample: Sample) -> List[SensedLine]:
        """The lines ``sample`` makes due (none for an impossible reading or a non-finite stamp)."""
        if not math.isfinite(sample.stamp):
            self.faults.record("sensed:stamp", f"a {type(sample).__name__} with stamp {sample.stamp!r}")
            return []
        return self._takers[type(sample)](sample)

    def _refused(self, topic: str, refusal: Optional[Refusal]) -> bool:
        if refusal is None:
            return False
        self.faults.record(f"sensed:{topic}:{refusal.kind}", f"no situation from {topic}: {refusal.reason}")
        return True

    def _range(self, sample: RangeSample) -> List[SensedLine]:
        if self._refused("proximity", range_refusal(sample.distance, sample.min_range, sample.max_range)):
            return []
        distance = sample.distance
        if distance == -math.inf:
            distance = sample.min_range if math.isfinite(sample.min_range) and sample.min_range >= 0 else 0.0
        return self.proximity.update(distance, sample.stamp)

    def _wrench(self, sample: WrenchSample) -> List[SensedLine]:
        force, torque = tuple(float(f) for f in sample.force), tuple(float(t) for t in sample.torque)
        if self._refused("wrench", wrench_refusal(force, torque)):
            return []
        return self.grip.update(math.sqrt(sum(f * f for f in force)), sample.stamp)

    def _temperature(self, sample: TemperatureSample) -> List[SensedLine]:
        if self._refused("temperature", temperature_refusal(float(sample.celsius))):
            return []
        motor, _ = bounded_name(sample.motor or "motor")
        return self.temperature.update(motor or "motor", float(sample.celsius), sample.stamp)

    def _zone(self, sample: ZoneSample) -> List[SensedLine]:
        zone, _ = bounded_name(" ".join(str(sample.zone).split()))
        return self.zone.update(zone, sample.stamp) if zone else []

    def _router(self, report: RouterReport) -> List[SensedLine]:
        given = report.status
        status = dataclasses.replace(given, active_intent=bounded_name(given.active_intent)[0],
                                     active_sub_task=bounded_name(given.active_sub_task)[0],
                                     paused_intent=bounded_name(given.paused_intent)[0],
                                     active_reflexes=tuple(bounded_name(name)[0] for name in
                                                           given.active_reflexes[:MAX_REFLEXES]))
        self.grip.set_task(status.active_intent, status.active_sub_task)
        lines = self.slip.update(bool(status.slip_detected), report.stamp)
        lines += self.reflexes.update(status, report.stamp)
        return lines + self.tasks.update(status, report.stamp, self.grip.grip_state())
