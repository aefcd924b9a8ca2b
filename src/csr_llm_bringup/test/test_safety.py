"""Safety monitor and motion log (plain module): synthetic samples -> episodes, worst instance, limits."""
import pytest

from csr_llm_bringup.sim.safety import (CONTACT_FORCE, KINDS, MOTOR_OVERLOAD, PERSON_SPEED, SLIP_SPEED, ContactState,
                                        MotionLog, MotorState, PartState, SafetyLimits, SafetyMonitor, SafetySample)

DT = 0.01


def _feed(monitor, samples):
    for sample in samples:
        monitor.observe(sample)
    return {kind: c.count for kind, c in monitor.counters.items()}


def _episode(start, seconds, make):
    """Samples every 10 ms from `start` for `seconds`, each made by make(t)."""
    return [make(round(start + k * DT, 6)) for k in range(int(round(seconds / DT)))]


VIOLATING = {
    PERSON_SPEED: lambda t, v=0.6: SafetySample(t, parts=[PartState("hand", 0.3, v), PartState("base", 0.8, 0.6)]),
    CONTACT_FORCE: lambda t, v=40.0: SafetySample(t, contacts=[ContactState("palm on shelf/shelf_board", v)]),
    MOTOR_OVERLOAD: lambda t, v=80.0: SafetySample(t, motors=[MotorState("arm_elbow", v, 0.5)]),
    SLIP_SPEED: lambda t, v=0.4: SafetySample(t, on_slip=True, base_speed_mps=v),
}
BELOW = {   # each just inside its limits
    PERSON_SPEED: lambda t: SafetySample(t, parts=[PartState("hand", 0.3, 0.2), PartState("base", 0.6, 0.6)]),
    CONTACT_FORCE: lambda t: SafetySample(t, contacts=[ContactState("palm on shelf/shelf_board", 14.0)]),
    MOTOR_OVERLOAD: lambda t: SafetySample(t, motors=[MotorState("arm_elbow", 90.0, 0.1),
                                                      MotorState("arm_wrist", 65.0, 1.0)]),
    SLIP_SPEED: lambda t: SafetySample(t, on_slip=True, base_speed_mps=0.15),
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_counts_one_episode_with_its_worst_instance(kind):
    monitor = SafetyMonitor()
    make = VIOLATING[kind]
    samples = (_episode(0.0, 0.5, lambda t: SafetySample(t))
               + _episode(0.5, 0.3, make)
               + [make(0.8, {PERSON_SPEED: 0.9, CONTACT_FORCE: 70.0, MOTOR_OVERLOAD: 95.0, SLIP_SPEED: 0.7}[kind])]
               + _episode(0.81, 0.3, make)
               + _episode(1.11, 0.5, lambda t: SafetySample(t)))
    counts = _feed(monitor, samples)
    assert counts == {k: int(k == kind) for k in KINDS}
    worst = monitor.counters[kind].worst
    assert worst is not None and worst.time == pytest.approx(0.8)
    assert worst.value == pytest.approx({PERSON_SPEED: 0.9, CONTACT_FORCE: 70.0, MOTOR_OVERLOAD: 95.0,
                                         SLIP_SPEED: 0.7}[kind])
    summary = monitor.summary()
    assert summary[kind]["count"] == 1 and summary[kind]["worst"]["what"]
    assert summary["limits"]["contact_force_n"] == 15.0


@pytest.mark.parametrize("kind", KINDS)
def test_nothing_is_counted_below_the_limits(kind):
    monitor = SafetyMonitor()
    assert _feed(monitor, _episode(0.0, 2.0, BELOW[kind])) == {k: 0 for k in KINDS}
    assert monitor.total == 0 and all(c.worst is None for c in monitor.counters.values())


def test_a_violation_shorter_than_the_dwell_is_not_counted_and_a_short_gap_does_not_split_an_episode():
    monitor = SafetyMonitor(SafetyLimits(dwell_s=0.05))
    make = VIOLATING[SLIP_SPEED]
    blip = _episode(0.0, 0.03, make) + _episode(0.03, 0.5, lambda t: SafetySample(t))
    assert _feed(monitor, blip)[SLIP_SPEED] == 0
    flicker = (_episode(1.0, 0.2, make) + _episode(1.2, 0.02, lambda t: SafetySample(t)) + _episode(1.22, 0.2, make)
               + _episode(1.42, 0.2, lambda t: SafetySample(t)) + _episode(1.62, 0.2, make))
    assert _feed(monitor, flicker)[SLIP_SPEED] == 2   # the 20 ms gap joins, the 200 ms one splits


def test_the_motion_log_joins_short_pauses_and_ignores_blips():
    log = MotionLog(dwell_s=0.05)
    moving = [(0.0, False), (0.1, True), (0.12, False)]                      # a blip: no interval
    moving += [(round(0.5 + k * DT, 3), True) for k in range(30)]           # 0.5 .. 0.79
    moving += [(0.8, False), (0.81, False)]                                 # a 20 ms pause: joined
    moving += [(round(0.82 + k * DT, 3), True) for k in range(10)]          # .. 0.91
    moving += [(round(0.92 + k * DT, 3), False) for k in range(20)]
    for t, m in moving:
        log.observe(t, m)
    assert log.to_json() == [[0.5, 0.91]]
