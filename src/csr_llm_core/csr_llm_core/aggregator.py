"""Sensor aggregation: topics become StateChunk texts with a gap-free sequence number.

Event topics (std_msgs/String) become a chunk at once. Continuous topics become one
compact, deterministic summary line per `period` seconds, and only when a
value moved by more than the topic's `threshold` since the last summary, so a 1 kHz topic cannot
flood the prompt. Periods are measured on the samples' own time (sim time under use_sim_time),
not on a wall-clock timer: the chunks are a function of the input stream, so a replayed bag
yields the same chunks. Node modules convert ROS messages to the plain samples used here.

Event bursts are coalesced (``event_bursts.py``): past ``max_events_per_window`` events of one topic in
one window the rest are held, and while the burst lasts they become one counted chunk per
``burst_chunk_period``, so a flood costs the reasoning node about one short append per period
instead of a backlog it drains for minutes.

Impossible readings are refused (``SampleError``, with a ``kind`` for the node's FaultLog) before
they move anything: the bounds are ``csr_llm_common.plausibility``'s, the ones the router applies.
Sensed lines (``on_sensed``) are events on the ``sensed`` source stamped with their sensor time.
Text is bounded: events to ``max_event_chars``, names to MAX_NAME_CHARS (at most MAX_NAMES per line),
a summary to MAX_SUMMARY_CHARS; every cut is marked in the text and counted in ``faults``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from csr_llm_common.faults import FaultLog
from csr_llm_common.plausibility import (IMPOSSIBLE, MAX_NAMES, NONFINITE, TRUNCATION_MARK, Refusal,
                                         bounded_name, joint_refusal, temperature_refusal, wrench_refusal)

from .aggregator_config import (DEFAULT_SOURCES, KIND_CONTINUOUS, KIND_EVENT, KIND_WATERMARK, SOURCE_FIELDS,
                                TOPIC_TYPES, AggregatorConfig, TopicSpec, source_parameters, topic_specs)
from .event_bursts import CoalescedEvents, EventBursts
from .sensed_hold import SensedHold

__all__ = ["KIND_CONTINUOUS", "KIND_EVENT", "KIND_WATERMARK", "DEFAULT_SOURCES", "SOURCE_FIELDS", "TOPIC_TYPES",
           "AggregatorConfig", "TopicSpec", "source_parameters", "topic_specs", "Aggregator", "ChunkOut",
           "SampleError"]

SENSED_TOPIC = "sensed"       # the source of the lines the robot knows from its own sensing
_SPACES = re.compile(r"\s+")
SENSED_STALE_WINDOWS = 2      # a held sensed line goes out this many windows late at most (no samples)


class SampleError(ValueError):
    """A sample cannot be summarised (non-finite or impossible value, wrong lengths, empty event);
    ``kind`` names the fault for the node's FaultLog (one log line per kind)."""

    def __init__(self, message: str, kind: str = "invalid"):
        super().__init__(message)
        self.kind = kind


@dataclass
class ChunkOut:
    seq: int
    stamp: float
    source_topic: str
    kind: int
    text: str
    coalesced: int = 0       # events this chunk stands for beyond itself (a coalesced burst)


@dataclass
class _TopicState:
    spec: TopicSpec
    emitted: Optional[Tuple[float, ...]] = None
    last_emit: float = -math.inf
    extra: Dict[str, float] = field(default_factory=dict)   # per-frame values (motor temperatures)


@dataclass(frozen=True)
class Reading:
    """A validated sample: its values, its summary text, and (temperatures) the motor it is for,
    merged into the topic's line when it is taken. Names in ``text`` are already bounded."""
    values: Tuple[float, ...]
    text: str
    motor: str = ""
    truncated: int = 0       # names cut to MAX_NAME_CHARS (or left out past MAX_NAMES)


# No sensor of a robot reads beyond this (m, m/s, m/s^2, rad/s): larger values are corrupt and
# would also blow a summary line up to thousands of characters.
MAX_ABS_READING = 1.0e5
# A continuous summary never exceeds this (names are bounded first; this is the last guard).
MAX_SUMMARY_CHARS = 2000


def _refuse(refusal: Optional[Refusal]) -> None:
    if refusal is not None:
        raise SampleError(refusal.reason, refusal.kind)


def _finite(values: Sequence[float], what: str) -> Tuple[float, ...]:
    out = tuple(float(v) for v in values)
    if not all(math.isfinite(v) for v in out):
        raise SampleError(f"non-finite {what}", NONFINITE)
    if any(abs(v) > MAX_ABS_READING for v in out):
        raise SampleError(f"impossible {what} (|value| > {MAX_ABS_READING:g})", IMPOSSIBLE)
    return out


def _fmt(values: Sequence[float], digits: int = 2) -> str:
    return ",".join(f"{v:.{digits}f}" for v in values)


def _listed(names: Sequence[str], values: Sequence[float], fmt: str) -> Tuple[str, int]:
    """``name=value`` pairs with bounded names, at most MAX_NAMES of them; (text, names cut or left out)."""
    parts, cut = [], 0
    for name, value in zip(names[:MAX_NAMES], values):
        shown, was_cut = bounded_name(name)
        cut += was_cut
        parts.append(f"{shown}={value:{fmt}}")
    left_out = max(len(names) - MAX_NAMES, 0)
    return " ".join(parts) + (f" (+{left_out} more)" if left_out else ""), cut + left_out


def summarize_joint_states(sample: Mapping) -> Reading:
    names, position = list(sample["name"]), list(sample["position"])
    velocity = list(sample.get("velocity") or [])
    effort = list(sample.get("effort") or [])
    if len(names) != len(position) or (velocity and len(velocity) != len(names)) or \
            (effort and len(effort) != len(names)):
        raise SampleError(f"{len(names)} names but {len(position)} positions / {len(velocity)} velocities"
                          f" / {len(effort)} efforts", "length")
    try:
        pos, vel, eff = (tuple(float(v) for v in values) for values in (position, velocity, effort))
    except (TypeError, ValueError) as err:
        raise SampleError(f"non-numeric joint values ({err})", NONFINITE) from err
    _refuse(joint_refusal(pos, vel, eff))
    listed, cut = _listed(names, pos, ".2f")
    moving = max((abs(v) for v in vel), default=0.0)
    text = "joints[rad] " + listed + (f"; max speed {moving:.2f} rad/s" if moving >= 0.01 else "; still")
    return Reading(pos + (round(moving, 2),), text, truncated=cut)


def summarize_imu(sample: Mapping) -> Reading:
    acc = _finite(sample["linear_acceleration"], "acceleration")
    gyro = _finite(sample["angular_velocity"], "angular velocity")
    return Reading(acc + gyro, f"acc[m/s2]=({_fmt(acc, 1)}) gyro[rad/s]=({_fmt(gyro, 2)})")


def summarize_odometry(sample: Mapping) -> Reading:
    x, y, yaw = _finite((sample["x"], sample["y"], sample["yaw"]), "pose")
    v, w = _finite((sample["v"], sample["w"]), "twist")
    return Reading((x, y, yaw, v, w), f"x={x:.2f} y={y:.2f} m yaw={yaw:.2f} rad v={v:.2f} m/s w={w:.2f} rad/s")


def summarize_wrench(sample: Mapping) -> Reading:
    force = tuple(float(f) for f in sample["force"])
    _refuse(wrench_refusal(force, tuple(float(t) for t in sample.get("torque") or ())))
    norm = math.sqrt(sum(f * f for f in force))
    return Reading((norm,), f"grip force {norm:.1f} N")


def summarize_temperature(sample: Mapping) -> Reading:
    """One motor's temperature; the topic's line lists every motor seen (``Aggregator.on_reading``)."""
    try:
        celsius = float(sample["temperature"])
    except (TypeError, ValueError) as err:
        raise SampleError(f"non-numeric motor temperature ({err})", NONFINITE) from err
    _refuse(temperature_refusal(celsius))
    motor, cut = bounded_name(sample.get("frame_id") or "motor")
    return Reading((celsius,), "", motor=motor or "motor", truncated=int(cut))


SUMMARIZERS: Dict[str, Callable[[Mapping], Reading]] = {
    "joint_states": summarize_joint_states, "imu": summarize_imu, "odometry": summarize_odometry,
    "wrench": summarize_wrench, "temperature": summarize_temperature,
}


class Aggregator:
    """Chunks from samples and events.

    With `watermark_period` > 0, each time sample time crosses a multiple of it the aggregator
    emits the continuous summaries of the closed window, sorted by (stamp, topic), then a
    watermark: every chunk stamped before it has been emitted, and the order of summaries that
    share a stamp no longer depends on which topic's message arrived first (replays reproduce the
    chunk stream exactly). Watermarks carry the seq the next chunk will get and do not consume one.
    Events are emitted at once, stamped with the start of the open window (with watermarks) or the
    newest sample time seen (without): never a receive clock.
    """

    def __init__(self, specs: Sequence[TopicSpec], *, max_event_chars: int = 300, first_seq: int = 0,
                 watermark_period: float = 0.0, future_tolerance_s: float = math.inf, max_lag_s: float = math.inf,
                 warmup_windows: int = 0, max_events_per_window: int = 0, event_window: float = 0.5,
                 burst_chunk_period: float = 0.0, faults: Optional[FaultLog] = None):
        self.faults = faults if faults is not None else FaultLog()   # counts the cut texts
        self.topics: Dict[str, _TopicState] = {}
        for spec in specs:
            if spec.type not in TOPIC_TYPES:
                raise ValueError(f"topic {spec.topic}: type must be one of {TOPIC_TYPES}, got {spec.type!r}")
            if spec.period <= 0 or spec.threshold < 0:
                raise ValueError(f"topic {spec.topic}: period must be > 0 and threshold >= 0")
            self.topics[spec.topic] = _TopicState(spec)
        self.max_event_chars = max_event_chars
        self.next_seq = first_seq
        self.watermark_period = float(watermark_period)
        self._next_watermark: Optional[float] = None
        self._window: List[ChunkOut] = []        # continuous summaries held until the next watermark
        self.last_sample_stamp: Optional[float] = None
        self.warmup_left = int(warmup_windows) if self.watermark_period > 0 else 0
        self._warmup_end: Optional[float] = None     # samples stamped before it are not summarised
        self.future_tolerance_s = float(future_tolerance_s)
        self.max_lag_s = float(max_lag_s)
        self.event_window = self.watermark_period if self.watermark_period > 0 else float(event_window)
        self.bursts = EventBursts(max_events_per_window, self.event_window, burst_chunk_period)
        self.sensed_hold = SensedHold()

    def check_stamp(self, stamp: float, now: Optional[float] = None) -> None:
        """SampleError for a stamp that is not finite, ahead of the clock ``now`` (when known, i.e.
        > 0) by more than future_tolerance_s, or behind the newest accepted sample by more than
        max_lag_s. Call before ``watermark``/``on_sample``: a rejected sample moves nothing."""
        if not math.isfinite(stamp):
            raise SampleError(f"non-finite stamp {stamp!r}", "stamp")
        if now is not None and now > 0 and stamp > now + self.future_tolerance_s:
            raise SampleError(f"stamp {stamp:.3f} s is {stamp - now:.3f} s ahead of the clock", "stamp")
        if self.last_sample_stamp is not None and stamp < self.last_sample_stamp - self.max_lag_s:
            raise SampleError(f"stamp {stamp:.3f} s is {self.last_sample_stamp - stamp:.3f} s behind the stream",
                              "stamp")

    def _emit(self, chunk: ChunkOut) -> ChunkOut:
        chunk.seq = self.next_seq
        self.next_seq += 1
        return chunk

    @property
    def max_events_per_window(self) -> int:
        return self.bursts.max_per_window

    @property
    def coalesced_total(self) -> int:
        """Events folded into burst chunks since start."""
        return self.bursts.coalesced_total

    def _coalesced_chunks(self, held: Sequence[CoalescedEvents]) -> List[ChunkOut]:
        out: List[ChunkOut] = []
        for h in held:
            stamp = round(h.closing_window * self.event_window, 9)
            if h.released:
                out.extend(self._emit(ChunkOut(-1, stamp, h.topic, KIND_EVENT, f"[{stamp:.1f}s] {h.topic}: {body}"))
                           for body in h.released)
            else:
                out.append(self._emit(ChunkOut(-1, stamp, h.topic, KIND_EVENT, h.text(self.event_window),
                                               coalesced=h.count)))
        return out

    def watermark(self, stamp: float) -> List[ChunkOut]:
        """The chunks due once sample time reached `stamp`: the closed window's summaries, the
        event bursts it coalesced and its watermark (without watermarks, just closed bursts)."""
        if self.watermark_period <= 0:
            return self._coalesced_chunks(self.bursts.close(self.bursts.window_of(stamp))) if self.bursts.active else []
        if self._next_watermark is None:
            self._next_watermark = (math.floor(stamp / self.watermark_period) + 1) * self.watermark_period
            if self.warmup_left > 0:
                self._warmup_end = self._next_watermark + (self.warmup_left - 1) * self.watermark_period
            return []
        if stamp < self._next_watermark - 1e-9:
            return []
        boundary = math.floor(stamp / self.watermark_period + 1e-9) * self.watermark_period
        held = self.sensed_hold.due(boundary)
        self._next_watermark = boundary + self.watermark_period
        if self.warmup_left > 0:
            self.warmup_left -= 1
        ready = sorted((c for c in self._window if c.stamp < boundary - 1e-9),
                       key=lambda c: (c.stamp, c.source_topic, c.text))
        self._window = [c for c in self._window if c.stamp >= boundary - 1e-9]
        out = [self._emit(c) for c in ready]
        for line_stamp, text in held:
            out.extend(self._event_chunks(SENSED_TOPIC, text, line_stamp))
        out.extend(self._coalesced_chunks(self.bursts.close(self.bursts.window_of(boundary))))
        out.append(ChunkOut(self.next_seq, round(boundary, 9), "", KIND_WATERMARK, ""))
        return out

    def on_sensed(self, text: str, stamp: float, now: Optional[float] = None, *, event: bool = True) -> List[ChunkOut]:
        """A line the robot sensed (``situations.py``) on SENSED_TOPIC, stamped with its sensor time but
        never before the open window (no chunk behind a watermark already sent): an event chunk, or
        with ``event=False`` a state chunk (KIND_CONTINUOUS: read like a summary, decided on by no
        one). With watermarks both wait for the window's close. SampleError for a refused stamp."""
        self.check_stamp(stamp, now)
        body = self._event_body(SENSED_TOPIC, text)
        windows = self.watermark_period > 0 and self._next_watermark is not None
        if self.watermark_period > 0 and self._next_watermark is not None:
            stamp = max(stamp, round(self._next_watermark - self.watermark_period, 9))
        if event:
            if not windows:
                return self.on_event(SENSED_TOPIC, text, stamp, sensor_time=True)
            self.sensed_hold.add(stamp, body)          # released sorted at the window's close
            return []
        state = ChunkOut(-1, stamp, SENSED_TOPIC, KIND_CONTINUOUS, f"[{stamp:.1f}s] {SENSED_TOPIC}: {body}")
        if not windows:
            return [self._emit(state)]
        self._window.append(state)                     # with the window's summaries, sorted
        return []

    def release_stale_sensed(self, now: float) -> List[ChunkOut]:
        """Sensed lines (events and state) whose window should have closed ``SENSED_STALE_WINDOWS``
        windows ago by the clock ``now`` while no sample closed it (a quiet sensor stream): released."""
        if self._next_watermark is None:
            return []
        cutoff = now - SENSED_STALE_WINDOWS * self.watermark_period
        state = sorted((c for c in self._window if c.source_topic == SENSED_TOPIC and c.stamp < cutoff),
                       key=lambda c: (c.stamp, c.text))
        self._window = [c for c in self._window if c not in state]
        out = [self._emit(c) for c in state]
        start = round(self._next_watermark - self.watermark_period, 9)
        for stamp, body in self.sensed_hold.due(cutoff):
            out.extend(self._event_chunks(SENSED_TOPIC, body, max(stamp, start)))
        return out

    def on_event(self, topic: str, text: str, stamp: Optional[float] = None, *,
                 sensor_time: bool = False) -> List[ChunkOut]:
        """An event becomes a chunk at once (whitespace collapsed, length bounded), unless it is
        past the burst limit of its window: then it is held for that window's coalesced chunk.
        Returns the chunks to publish now, in order (a closed burst first, without watermarks)."""
        body = self._event_body(topic, text)
        if self.watermark_period > 0 and self._next_watermark is not None:
            # the start of the open window: which samples were processed before the event (a
            # race between subscriptions) changes nothing, so replays give the same text and stamp
            start = round(self._next_watermark - self.watermark_period, 9)
            stamp = max(stamp, start) if sensor_time and stamp is not None else start
        elif self.last_sample_stamp is not None and not sensor_time:
            stamp = self.last_sample_stamp
        return self._event_chunks(topic, body, 0.0 if stamp is None else stamp)

    def _event_body(self, topic: str, text: str) -> str:
        body = _SPACES.sub(" ", text or "").strip()
        if not body:
            raise SampleError("empty event text", "empty")
        if len(body) > self.max_event_chars:
            self.faults.record("event_truncated", f"a {len(body)}-character event on {topic} cut to "
                               f"{self.max_event_chars} characters")
            body = body[: self.max_event_chars] + " [truncated]"
        return body

    def _event_chunks(self, topic: str, body: str, stamp: float) -> List[ChunkOut]:
        out: List[ChunkOut] = []
        if self.bursts.enabled:
            due, alone = self.bursts.admit(topic, body, stamp)
            out.extend(self._coalesced_chunks(due))
            if not alone:
                return out
        # one decimal: without watermarks the newest sample time differs by a sample period between runs
        out.append(self._emit(ChunkOut(-1, stamp, topic, KIND_EVENT, f"[{stamp:.1f}s] {topic}: {body}")))
        return out

    def reading(self, topic: str, sample: Mapping) -> Reading:
        """Validate and summarise a sample without taking it (SampleError when it is refused:
        then nothing moved, so a node checks this before ``watermark``)."""
        state = self.topics[topic]
        reading = SUMMARIZERS[state.spec.type](sample)
        if reading.motor and reading.motor not in state.extra and len(state.extra) >= MAX_NAMES:
            raise SampleError(f"more than {MAX_NAMES} motors on {topic}", "too_many_names")
        return reading

    def take_sample(self, topic: str, sample: Mapping, stamp: float, now: Optional[float] = None) -> List[ChunkOut]:
        """A sample as a node receives it: validated, its stamp checked (``now``: the clock), then
        the chunks it makes due (the window it closes, its summary). A refused sample changes
        nothing and is counted in ``faults`` as ``<topic>:<kind>`` (one log line per kind)."""
        try:
            reading = self.reading(topic, sample)
            self.check_stamp(stamp, now)
        except (SampleError, KeyError, TypeError, ValueError) as err:
            kind = err.kind if isinstance(err, SampleError) else type(err).__name__
            self.faults.record(f"{topic}:{kind}", f"ignored a sample on {topic}: {err}")
            return []
        out = self.watermark(stamp)
        chunk = self.on_reading(topic, reading, stamp)
        return out if chunk is None else out + [chunk]

    def on_sample(self, topic: str, sample: Mapping, stamp: float) -> Optional[ChunkOut]:
        """``reading`` then ``on_reading``: SampleError for a refused sample, which changes nothing."""
        return self.on_reading(topic, self.reading(topic, sample), stamp)

    def on_reading(self, topic: str, reading: Reading, stamp: float) -> Optional[ChunkOut]:
        """Take a validated reading; returns a summary chunk when one is due and worth it
        (with watermarks, summaries come out of `watermark` instead and this returns None)."""
        state = self.topics[topic]
        # by the sample's stamp, not by whether the watermark got here first: a sample's fate must
        # not depend on the order two topics' messages were taken in
        if (self.warmup_left > 0 and self._warmup_end is None) or \
                (self._warmup_end is not None and stamp < self._warmup_end - 1e-9):
            return None
        if reading.truncated:
            self.faults.record("name_truncated", f"{reading.truncated} names on {topic} cut to their bound")
        values, text = reading.values, reading.text
        if reading.motor:
            state.extra[reading.motor] = reading.values[0]
            values = tuple(state.extra[k] for k in sorted(state.extra))
            text = "motor temperatures[C] " + " ".join(f"{k}={state.extra[k]:.1f}" for k in sorted(state.extra))
        self.last_sample_stamp = stamp if self.last_sample_stamp is None else max(self.last_sample_stamp, stamp)
        if stamp - state.last_emit < state.spec.period:
            return None
        if state.emitted is not None and len(state.emitted) == len(values) and \
                max(abs(a - b) for a, b in zip(values, state.emitted)) < state.spec.threshold:
            return None
        state.emitted, state.last_emit = values, stamp
        if len(text) > MAX_SUMMARY_CHARS:
            self.faults.record("summary_truncated", f"a {len(text)}-character summary of {topic}")
            text = text[:MAX_SUMMARY_CHARS] + TRUNCATION_MARK
        chunk = ChunkOut(-1, stamp, topic, KIND_CONTINUOUS, f"[{stamp:.2f}s] {topic}: {text}")
        if self.watermark_period > 0:
            self._window.append(chunk)
            return None
        return self._emit(chunk)
