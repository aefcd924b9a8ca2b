"""The aggregator's topics and parameters (plain module, no rclpy)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Sequence

KIND_EVENT = 0
KIND_CONTINUOUS = 1
KIND_WATERMARK = 2
TOPIC_TYPES = ("joint_states", "imu", "odometry", "temperature", "wrench", "event")


@dataclass
class TopicSpec:
    topic: str
    type: str
    period: float = 1.0          # s between summaries of a continuous topic
    threshold: float = 0.02      # minimum change (in the topic's units) that is worth a summary

    @property
    def kind(self) -> int:
        return KIND_EVENT if self.type == "event" else KIND_CONTINUOUS


# name -> (topic, type, period s, threshold): the topics a standard robot publishes.
DEFAULT_SOURCES: Dict[str, TopicSpec] = {
    "joint_states": TopicSpec("joint_states", "joint_states", 1.0, 0.05),
    "imu": TopicSpec("imu", "imu", 1.0, 0.5),
    "odom": TopicSpec("odom", "odometry", 1.0, 0.05),
    "motor_temperature": TopicSpec("motor_temperature", "temperature", 2.0, 1.0),
    "gripper_wrench": TopicSpec("gripper/wrench", "wrench", 0.5, 2.0),
    "events": TopicSpec("events", "event", 1.0, 0.0),
}


@dataclass
class AggregatorConfig:
    """The aggregator node's parameters, one default each (the node declares them with
    ``declare_dataclass``, all read-only).

    ``sources`` names the inputs; each name has its own parameters ``<name>.topic``,
    ``<name>.type``, ``<name>.period`` and ``<name>.threshold`` (``source_parameters``: defaults
    from DEFAULT_SOURCES for the names listed there; a new name needs at least ``<name>.type``).
    """
    sources: List[str] = field(default_factory=lambda: list(DEFAULT_SOURCES))
    max_event_chars: int = 300
    watermark_period: float = 0.5    # s of sample time between watermarks (0: none); match 1/decision_hz
    # sensors read reliably (a simulator or a bag player publishing reliable: lossless, so a
    # replay sees every sample the run saw); false for real drivers, which publish best effort
    reliable_sensors: bool = False
    # continuous samples of the first N watermark windows are not summarised: while a graph
    # starts, which early samples reach which node is a discovery race, so a run and its replay
    # agree on the chunk stream only from the first boundary on (events are always kept)
    warmup_windows: int = 0
    # a sample stamped this far ahead of the node clock is rejected (one stamp from the future
    # would otherwise move every window and watermark past the stream's real time)
    future_tolerance_s: float = 1.0
    # a sample stamped this far behind the newest accepted one is rejected (stale or replayed)
    max_lag_s: float = 10.0
    # events of one topic per window that become chunks of their own; the rest of a burst is
    # coalesced into one chunk when the window closes (0: never coalesce)
    max_events_per_window: int = 5
    # while a burst lasts (a window went over the limit), all its events are held and coalesced
    # into one chunk per this many seconds (whole windows, at least one)
    burst_chunk_period: float = 1.0
    # the burst window without watermarks (s); with watermarks it is the watermark window
    event_window: float = 0.5
    cpu_affinity: str = ""           # CPUs for this node's threads, taskset syntax; "" = any


SOURCE_FIELDS = ("topic", "type", "period", "threshold")


def source_parameters(names: Sequence[str]) -> Dict[str, Any]:
    """``<name>.topic|type|period|threshold`` of every source name with its default."""
    out: Dict[str, Any] = {}
    for name in names:
        base = DEFAULT_SOURCES.get(name, TopicSpec(name, "", 1.0, 0.0))
        out.update({f"{name}.{key}": getattr(base, key) for key in SOURCE_FIELDS})
    return out


def topic_specs(names: Sequence[str], values: Mapping[str, Any]) -> List[TopicSpec]:
    """The topics to aggregate from the flat ``<name>.<field>`` parameter values."""
    specs = []
    for name in names:
        kind = str(values[f"{name}.type"])
        if not kind:
            raise ValueError(f"source {name!r}: set {name}.type (one of the aggregator's topic types)")
        specs.append(TopicSpec(str(values[f"{name}.topic"]), kind, float(values[f"{name}.period"]),
                               float(values[f"{name}.threshold"])))
    return specs
