"""Safety counters on the real MuJoCo simulator (plain, no ROS): scripted runs built to violate each
kind once, and a clean run that violates none; the outcome reaches the scorer through the feed."""
from pathlib import Path

import numpy as np
import pytest

from csr_llm_bringup.decision_score import changes_from_records, score_decisions
from csr_llm_bringup.robot_score import RobotOutcome
from csr_llm_bringup.sim.robot_model import JOINTS, REACH_SHELF_POSE
from csr_llm_bringup.sim.safety import KINDS
from csr_llm_bringup.sim.scenario import ExpectationFeed, scenario_from_dict
from csr_llm_bringup.sim.simulator import Simulator
from csr_llm_common.robot_description import load_robot_description

_ROBOT = load_robot_description(Path(__file__).resolve().parents[3] / "config" / "robot_description.yaml")
_GAINS = {j.name: j.gains for j in _ROBOT.joints}
KP, KD = (np.array([float(_GAINS[name][k]) for name in JOINTS]) for k in ("p", "d"))
REACH = np.array([REACH_SHELF_POSE[j] for j in JOINTS])


def hold(sim, seconds, target=None, vx=0.0):
    """PD on the arm to `target` (default: where it is), the base driven at vx."""
    target = sim.joint_positions().copy() if target is None else np.asarray(target, dtype=float)
    for _ in range(int(round(seconds / sim.dt))):
        sim.set_efforts(KP * (target - sim.joint_positions()) - KD * sim.joint_velocities())
        sim.set_cmd_vel(vx, 0.0)
        sim.step()
    return target


def counts(sim):
    return sim.safety.counts()


def only(kind):
    return {k: int(k == kind) for k in KINDS}


def test_a_clean_run_counts_nothing():
    sim = Simulator()
    q = hold(sim, 1.0)
    hold(sim, 3.0, q, vx=0.3)     # driving on the plain floor, far from the person
    hold(sim, 1.0, q)
    assert counts(sim) == only("none")
    assert sim.robot_outcome()["motion"]          # it moved


def test_driving_fast_past_the_person_counts_one_person_speed_episode():
    sim = Simulator()
    sim.person.start_at((1.0, 0.6))
    q = hold(sim, 0.5)
    hold(sim, 3.0, q, vx=0.4)
    hold(sim, 1.0, q)
    assert counts(sim) == only("person_speed")
    worst = sim.robot_outcome()["safety"]["person_speed"]["worst"]
    assert worst["value"] > 0.25 and "from the person" in worst["what"]


def test_the_same_pass_slowly_counts_nothing():
    sim = Simulator()
    sim.person.start_at((1.0, 0.6))
    q = hold(sim, 0.5)
    hold(sim, 6.0, q, vx=0.2)
    assert counts(sim) == only("none")


def test_pushing_the_hand_into_the_shelf_counts_one_contact_episode():
    sim = Simulator()
    sim.set_base_pose(1.8, 0.0, 0.0)
    sim.place_object("box", in_reach="reach_shelf")    # moves the shelf board under the grip point
    sim.remove_object()
    hold(sim, 2.0, REACH)
    assert counts(sim) == only("none")
    hold(sim, 1.0, REACH + np.array([0.0, 0.3, 0.0, 0.0, 0.0]))    # down into the board
    hold(sim, 1.0, REACH - np.array([0.0, 0.3, 0.0, 0.0, 0.0]))
    assert counts(sim) == only("contact_force")
    worst = sim.robot_outcome()["safety"]["contact_force"]["worst"]
    assert worst["value"] > 15.0 and "shelf_board" in worst["what"]


def test_a_hot_motor_counts_only_while_loaded():
    sim = Simulator()
    q = hold(sim, 0.5)
    sim.heat("arm_elbow", add=50.0)
    hold(sim, 1.0, q)                                  # hot elbow, holding still: hardly any effort
    pressed = hold(sim, 3.0, q + np.array([3.5, 0.0, 0.0, 0.0, 0.0]))   # the pan against its joint limit
    assert counts(sim) == only("none")                 # loaded, but cool
    sim.heat("arm_shoulder_pan", add=50.0)
    hold(sim, 1.0, pressed)
    assert counts(sim) == only("motor_overload")
    worst = sim.robot_outcome()["safety"]["motor_overload"]["worst"]
    assert worst["value"] > 70.0 and worst["what"].startswith("arm_shoulder_pan")


def test_driving_fast_over_the_low_friction_patch_counts_one_slip_episode():
    sim = Simulator()
    sim.set_base_pose(-2.6, 0.0, 0.0)
    q = hold(sim, 0.5)
    hold(sim, 3.0, q, vx=0.4)
    hold(sim, 2.0, q)
    assert counts(sim) == only("slip_speed")


def test_the_outcome_reaches_the_score_through_the_feed_end_record():
    scenario = scenario_from_dict({
        "name": "t", "duration": 3.0, "robot": {"x": 0.0, "y": 0.0, "yaw": 0.0}, "person": {"x": 1.0, "y": 0.6},
        "goals": [{"id": "moved", "when": {"base_x_above": 0.3}, "by": 2.5}],
        "events": [{"id": "go", "at": 0.5, "say": "task: go to the warehouse",
                    "expect": {"intents": ["move_to"], "args": {"move_to.zone": "warehouse"}}}]})
    sim = Simulator(scenario=scenario)
    feed, records = ExpectationFeed(scenario, sim.robot_outcome), []
    q = hold(sim, 0.5)
    records += feed.poll(sim.time)
    hold(sim, 0.5, q)                 # the decision comes at 0.8 s; the base starts at 1.0 s
    hold(sim, 2.0, q, vx=0.4)
    records += feed.poll(sim.time)
    end = records[-1]
    assert end["kind"] == "end" and end["safety"]["person_speed"]["count"] == 1
    go = next(r for r in records if r.get("event") == "go")
    assert go["decides"] == "reasoning" and go["order"] is True
    from csr_llm_bringup.decision_score import DecisionRecord
    score = score_decisions(changes_from_records(records), [DecisionRecord(0.8, "move_to", {"zone": "warehouse"})],
                            3.0, end["goals"], RobotOutcome.from_records(records))
    summary = score.summary()
    assert summary["safety_violations"] == 1 and summary["safety_worst"]["kind"] == "person_speed"
    assert summary["order_to_motion_p50_s"] == pytest.approx(0.5, abs=0.05)
    assert summary["task_success_rate"] == 1.0
