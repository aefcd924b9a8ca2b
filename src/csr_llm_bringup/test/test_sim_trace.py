"""A short deterministic simulator run against its recorded trace (plain module, no ROS).

The run exercises every part of the simulator: arm efforts with the torque-speed limit, cmd_vel
onto the slip patch, a scripted drive with brake, the person walking, heat, the object placed in
reach and removed, the crate. The reference (test/data/sim_trace_reference.json) was recorded with
``python test/test_sim_trace.py --record``; it is bit-identical on the machine that recorded it, and
the tolerance only absorbs libm/SIMD rounding differences between machines.
"""
import json
import sys
from pathlib import Path

import numpy as np

from csr_llm_bringup.sim.simulator import Simulator

REFERENCE = Path(__file__).resolve().parent / "data" / "sim_trace_reference.json"
TARGET = np.array([0.3, 0.7, -1.0, 0.3, 0.04])
KP, KD = np.array([60.0, 90.0, 50.0, 20.0, 200.0]), np.array([4.0, 6.0, 3.0, 1.0, 5.0])


def _actions(sim: Simulator, k: int) -> None:
    """World actions at fixed steps (1 ms each)."""
    if k == 0:
        sim.set_base_pose(-0.6, 0.05, 0.02)
        sim.heat("arm_shoulder_lift", rate=8.0, duration=1.0, add=2.0)
        sim.person_approach(0.6, speed=2.0)
        sim.say("start")
    elif k == 1000:
        sim.drive(0.3, to_x=-0.2, brake=0.3, timeout=1.5)
    elif k == 1500:
        sim.place_object("box", in_reach="reach_shelf")
    elif k == 2000:
        sim.person_to(1.0, 1.0, 1.0)
    elif k == 2500:
        sim.remove_object()
        sim.place_crate(1.0, 0.5, 0.3)


def _row(sim: Simulator) -> list:
    _, angle, speed, torque = sim.wheel_states()
    floats = [*sim.joint_positions(), *sim.joint_velocities(), *sim.joint_efforts(), *sim.base_pose(),
              *sim.base_velocity(), *sim.odom(), *angle, *speed, *torque, *sim.temperatures(),
              *sim.pad_forces(), sim.grip_force(), sim.person_distance(), sim.door_angle(),
              *sim.object_position(), *sim.imu()[0]]
    return [[float(v) for v in floats], sim.zone(), bool(sim.on_slip), bool(sim.driving),
            len(sim.detected_objects())]


def trace(steps: int = 3000, every: int = 100) -> dict:
    sim = Simulator()
    rows = []
    for k in range(steps):
        _actions(sim, k)
        q, qd = sim.joint_positions(), sim.joint_velocities()
        u = KP * (TARGET - q) - KD * qd
        if k >= 2000:
            u[4] = -15.0
        sim.set_efforts(u)
        if k < 1000:
            sim.set_cmd_vel(-0.4, 0.3)
        sim.step()
        if sim.steps % every == 0:
            rows.append(_row(sim))
    truth = sim.truth()
    return {"rows": rows, "events": sim.pop_events(), "truth_keys": sorted(truth)}


def test_a_short_run_reproduces_the_recorded_trace():
    got = trace()
    ref = json.loads(REFERENCE.read_text())
    assert got["truth_keys"] == ref["truth_keys"]
    assert [list(e) for e in got["events"]] == ref["events"]
    assert len(got["rows"]) == len(ref["rows"])
    for k, (row, want) in enumerate(zip(got["rows"], ref["rows"])):
        assert row[1:] == want[1:], k
        np.testing.assert_allclose(row[0], want[0], rtol=1e-9, atol=1e-9, err_msg=f"row {k}")


if __name__ == "__main__" and "--record" in sys.argv:
    REFERENCE.parent.mkdir(exist_ok=True)
    REFERENCE.write_text(json.dumps(trace()) + "\n")
