"""Event bursts coalesced into counted chunks (plain module, no rclpy).

Per topic and per window (sample time, so a replay coalesces alike): the first
``max_per_window`` events pass as chunks of their own; the rest are held. A window over the limit
starts a sustained burst: from the next window on, every event of that topic is held (but one
per window of a kind the burst has not held yet: an order typed during a flood of sensor
notices still reads as typed; kinds are the text with its numbers masked), and the
held events become one chunk per ``chunk_period`` (rounded to whole windows), so a flood costs the
reasoning node a few short chunks, not a backlog: the period doubles after each chunk while the
burst lasts (up to MAX_PERIOD_GROWTH times). The first window that stays within
the limit ends the burst: what earlier windows held is coalesced, and that window's own events
(no more than the limit) are released as they were sent. Nothing is dropped silently: each
coalesced chunk says how many events it stands for and of which kinds (the text with its numbers
masked); it is short, as every token of it is prefilled before a later decision.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

MAX_KINDS_TRACKED = 16      # distinct kinds counted per coalesced chunk (the rest: "other")
MAX_PERIOD_GROWTH = 8       # a lasting burst's chunk period doubles after each chunk, up to this many times
NOVEL_PER_WINDOW = 1        # events per window of a kind the burst has not held, passed during it
KINDS_LISTED = 3
KIND_CHARS = 60
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
OTHER_KIND = "other"


def event_kind(text: str) -> str:
    """What an event is about without its numbers: 'sensor 3 at 1.5 m' -> 'sensor # at # m'."""
    kind = _NUMBER.sub("#", text)
    return kind if len(kind) <= KIND_CHARS else kind[:KIND_CHARS] + "..."


@dataclass(frozen=True)
class CoalescedEvents:
    """The events of one topic held back from `first_window` to `last_window` (inclusive), let out
    when `closing_window` closed (its start is the chunk's stamp: stamps never go back)."""
    topic: str
    count: int
    first_window: int
    last_window: int
    closing_window: int
    kinds: Tuple[Tuple[str, int], ...]   # most frequent first
    released: Tuple[str, ...] = ()      # held events let go as they were (the burst ended with few held)

    def text(self, window_s: float) -> str:
        stamp = round(self.closing_window * window_s, 9)
        span = (self.last_window - self.first_window + 1) * window_s
        listed = "; ".join(f"'{kind}' x{n}" for kind, n in self.kinds[:KINDS_LISTED])
        if len(self.kinds) > KINDS_LISTED:
            listed += f"; {sum(n for _, n in self.kinds[KINDS_LISTED:])} of other kinds"
        # short on purpose: every token of it is prefilled before a later decision reads the state
        return f"[{stamp:.1f}s] {self.topic}: {self.count} more events in {span:g} s (burst coalesced); kinds: {listed}"


@dataclass
class _Held:
    """Events held back: how many, of which kinds, the first few whole."""
    count: int = 0
    since: Optional[int] = None          # the window of the first
    until: int = 0                       # the window of the last
    kinds: Counter = field(default_factory=Counter)
    bodies: List[str] = field(default_factory=list)

    def add(self, body: str, window: int, keep: int) -> None:
        kind = event_kind(body)
        if kind not in self.kinds and len(self.kinds) >= MAX_KINDS_TRACKED:
            kind = OTHER_KIND
        self.kinds[kind] += 1
        if self.since is None:
            self.since = window
        self.count += 1
        self.until = window
        if len(self.bodies) < keep:
            self.bodies.append(body)

    def merge(self, later: "_Held") -> None:
        if not later.count:
            return
        if self.since is None:
            self.since = later.since
        self.count += later.count
        self.kinds.update(later.kinds)
        self.until = later.until

    def summary(self, topic: str, closing_window: int) -> CoalescedEvents:
        since = self.since if self.since is not None else self.until
        return CoalescedEvents(topic, self.count, since, self.until, closing_window,
                               tuple(self.kinds.most_common()))


@dataclass
class _TopicBurst:
    window: int
    passed: int = 0                  # events of this window that became chunks of their own
    seen: int = 0                    # events of this window
    sustained: bool = False          # an earlier window went over the limit: hold every event
    period: int = 1                  # windows per coalesced chunk now (doubles while the burst lasts)
    novel_passed: int = 0            # events of this window passed for a kind the burst had not held
    kinds_seen: Set[str] = field(default_factory=set)      # kinds of this topic's events since the burst began
    current: _Held = field(default_factory=_Held)      # held in this window
    carried: _Held = field(default_factory=_Held)      # held in earlier windows, not yet coalesced


class EventBursts:
    """Decides, per event, whether it becomes a chunk now, and when held events are coalesced."""

    def __init__(self, max_per_window: int, window_s: float, chunk_period_s: float = 0.0):
        if max_per_window and not window_s > 0:
            raise ValueError("event_window must be > 0 to coalesce event bursts")
        self.max_per_window = max(0, int(max_per_window))
        self.window_s = float(window_s)
        # whole windows per coalesced chunk while a burst lasts (at least one)
        self.period_windows = max(1, round(chunk_period_s / self.window_s)) if self.max_per_window else 1
        self._topics: Dict[str, _TopicBurst] = {}
        self.coalesced_total = 0

    @property
    def enabled(self) -> bool:
        return self.max_per_window > 0

    @property
    def active(self) -> bool:
        return bool(self._topics)

    def window_of(self, stamp: float) -> int:
        return math.floor(stamp / self.window_s + 1e-9)

    def admit(self, topic: str, body: str, stamp: float) -> Tuple[List[CoalescedEvents], bool]:
        """Account an event stamped `stamp`: the coalesced chunks an earlier window of this topic
        left due (without watermarks, the next event closes them), and whether the event becomes
        a chunk of its own (False: it is held for a coalesced one)."""
        window = self.window_of(stamp)
        due = self._close_topic(topic, window)
        state = self._topics.setdefault(topic, _TopicBurst(window, period=self.period_windows))
        state.seen += 1
        kind = event_kind(body)
        novel = kind not in state.kinds_seen and len(state.kinds_seen) < MAX_KINDS_TRACKED
        if novel:
            state.kinds_seen.add(kind)
        if state.sustained or state.passed >= self.max_per_window:
            if novel and state.novel_passed < NOVEL_PER_WINDOW:
                state.novel_passed += 1      # not what floods: an order typed during a flood reads as typed
                return due, True
            state.current.add(body, window, self.max_per_window)
            return due, False
        state.passed += 1
        return due, True

    def close(self, before_window: Optional[int] = None) -> List[CoalescedEvents]:
        """The coalesced chunks due once every window before `before_window` closed (None: all,
        whatever is held), one per topic in topic order."""
        out = []
        for topic in sorted(self._topics):
            out.extend(self._close_topic(topic, before_window))
        return out

    def _close_topic(self, topic: str, before_window: Optional[int]) -> List[CoalescedEvents]:
        """Close the windows of `topic` before `before_window`. A window over the limit adds its
        held events to the carried ones, coalesced at the burst's first window and then once per
        period; a window within the limit ends the burst: the carried events are coalesced, its
        own (no more than the limit) are released as they were."""
        out: List[CoalescedEvents] = []
        state = self._topics.get(topic)
        while state is not None and (before_window is None or state.window < before_window):
            over = state.seen > self.max_per_window
            carried = state.carried
            if over:
                carried.merge(state.current)
                spanned = state.window - (carried.since if carried.since is not None else state.window) + 1
                flush = not state.sustained or spanned >= state.period or before_window is None
            else:
                flush = True
            if flush and carried.count:
                out.append(carried.summary(topic, state.window))
                self.coalesced_total += carried.count
                state.carried = _Held()
                if state.sustained:
                    state.period = min(2 * state.period, MAX_PERIOD_GROWTH * self.period_windows)
            if not over and state.current.count:
                out.append(CoalescedEvents(topic, state.current.count, state.window, state.window, state.window,
                                           (), tuple(state.current.bodies)))
            if not over or before_window is None:
                del self._topics[topic]
                break
            state.window, state.passed, state.seen, state.novel_passed = state.window + 1, 0, 0, 0
            state.current, state.sustained = _Held(), True
        return out
