"""Every decision argument reaches the robot: move_to(zone, speed) drives the base to the zone's goal
(go-to-pose on odometry, done at the goal), pick_object(object) reaches for the object where the
scene has it and refuses (one log line + a decision request) when it is missing or out of reach,
back_off(distance) backs off that distance."""
import math

import pytest

from action_router.decision_args import resolve_arguments
from action_router.interrupts import SOURCE_TASK
from action_router.scene import EMPTY_SCENE, Scene, SceneFrames, SceneObject, choose_reach

from router_rig import Rig

FRAMES = SceneFrames("base_link", "odom", 1.0)


def requests_while(rig, seconds):
    out = []
    end = rig.now + seconds
    while rig.now < end:
        rig.step()
        out.extend(rig.router.command.requests)
    return out


@pytest.mark.parametrize("zone, speed", [("warehouse", 0.45), ("corridor", 0.2)])
def test_move_to_drives_to_the_zone_goal_at_the_decided_speed_and_completes(zone, speed):
    rig = Rig(base=True)
    r = rig.router
    goal = r.cfg.zones[zone].goal
    r.submit_decision("move_to", {"zone": zone, "speed": speed})
    top_speed = 0.0
    done = False
    end = rig.now + 40.0
    while rig.now < end and not done:
        rig.step()
        top_speed = max(top_speed, abs(r.command.base_vx))
        assert abs(r.command.base_vx) <= r.cfg["base_max_linear"]
        assert abs(r.command.base_wz) <= r.cfg["base_max_angular"]
        done = r.command.sub_task == "hold"
    assert done, f"still {r.command.sub_task} at {rig.base}"
    assert top_speed == pytest.approx(speed, rel=1e-3)
    assert math.hypot(goal.x - rig.base[0], goal.y - rig.base[1]) <= r.cfg["goal_tolerance"]
    assert "task move_to complete" in rig.infos
    assert r.level1.unknown_scene_count == 0          # turning and slowing down still match the task key
    rig.step(20)
    assert r.command.base_vx == 0.0 and r.command.base_wz == 0.0


def test_move_to_without_a_speed_uses_the_templates_and_stops_on_stale_odometry():
    rig = Rig(base=True)
    r = rig.router
    r.submit_decision("move_to", {"zone": "warehouse", "speed": 0.3})
    rig.step(200)
    assert r.command.base_vx == pytest.approx(0.3, abs=1e-3)
    rig.base = None                                                      # odometry stops arriving
    rig.step(int(r.cfg["odom_timeout_s"] * 1000) + 20)
    assert r.command.sub_task == "drive_to_zone" and r.command.base_vx == 0.0 and r.command.base_wz == 0.0


def test_move_to_times_out_into_the_unknown_scene_protocol():
    rig = Rig(base=True, **{"zones.warehouse.goal": [40.0, 0.0]})
    r = rig.router
    r.subtasks[r.subtask_index["drive_to_zone"]].timeout = 1.0
    r.submit_decision("move_to", {"zone": "warehouse", "speed": 0.3})
    requests = requests_while(rig, 1.2)
    assert "sub-task drive_to_zone timed out after 1 s" in rig.infos
    assert any(q.startswith("unknown scene") for q in requests)


def test_pick_object_with_the_object_in_reach_starts_the_reach():
    rig = Rig()
    r = rig.router
    rig.objects = [("bottle", (2.0, 1.0, 0.1)), ("box", (0.74, -0.25, 0.48))]
    r.submit_decision("pick_object", {"object": "box"})
    rig.step(3)
    assert r.command.intent == "pick_object" and r.command.sub_task == "reach_shelf"
    assert r.command.source == SOURCE_TASK and r.refused_decisions == 0
    assert rig.run_until(lambda r: r.command.sub_task == "grip_object", 5.0)


def test_a_missing_object_is_refused_with_one_line_and_one_request_and_what_runs_continues():
    rig = Rig()
    r = rig.router
    rig.objects = [("box", r.cfg.reach_targets[0].object_at)]
    r.submit_decision("hold_position")
    rig.step(5)
    r.submit_decision("pick_object", {"object": "bottle"})
    rig.step()
    assert r.command.requests == ("object bottle not in the scene (seen: box)",)
    assert r.command.intent == "hold_position" and r.command.sub_task == "hold"
    r.submit_decision("pick_object", {"object": "bottle"})               # the same decision again: quiet
    assert requests_while(rig, 0.01) == []
    refusals = [line for line in rig.infos if "refused" in line]
    assert refusals == ["decision pick_object refused: object bottle not in the scene (seen: box); "
                        "what runs is unchanged"]
    assert r.refused_decisions == 2


def test_no_scene_at_all_is_a_refusal_not_a_blind_reach():
    rig = Rig()
    rig.router.submit_decision("pick_object", {"object": "box"})
    rig.step()
    assert rig.router.command.requests == ("object box not in the scene (no detections yet)",)
    assert rig.router.command.intent == "" and rig.router.command.effort.tolist() == [0.0] * rig.router.n


def test_an_object_out_of_reach_is_refused():
    rig = Rig()
    r = rig.router
    rig.objects = [("box", (1.5, -0.25, 0.48))]                            # 0.77 m beyond the shelf reach
    r.submit_decision("pick_object", {"object": "box"})
    rig.step()
    (request,) = r.command.requests
    assert request.startswith("object box out of reach at (1.50, -0.25, 0.48) m in base_link")
    assert "from reach shelf_front_right" in request and r.command.intent == ""


def test_a_stale_scene_counts_as_no_scene_and_a_new_decision_re_reports():
    rig = Rig()
    r = rig.router
    rig.objects = [("box", r.cfg.reach_targets[0].object_at)]
    rig.step()
    rig.objects = None                                                    # perception stops publishing
    rig.step(int(r.cfg["scene_timeout_s"] * 1000) + 10)
    r.submit_decision("pick_object", {"object": "box"})
    rig.step()
    assert r.command.requests == ("object box not in the scene (no detections for over 1 s)",)
    r.submit_decision("back_off", {"distance": 0.1})                      # accepted: the refusal memory clears
    rig.step()
    r.submit_decision("pick_object", {"object": "box"})
    rig.step()
    assert len(r.command.requests) == 1


def test_a_running_pick_is_confirmed_without_a_new_scene_check():
    rig = Rig()
    r = rig.router
    rig.objects = [("box", r.cfg.reach_targets[0].object_at)]
    r.submit_decision("pick_object", {"object": "box"})
    rig.step(100)
    rig.objects = [("box", (0.5, 0.0, 0.9))]                              # lifted with the hand
    rig.step()
    r.submit_decision("pick_object", {"object": "box"})
    rig.step()
    assert r.command.requests == () and r.repeated_decisions == 1 and r.command.intent == "pick_object"


def test_detections_in_the_odometry_frame_are_moved_into_the_base_frame():
    target = Rig().cfg.reach_targets[0]
    bx, by, yaw = 3.0, 1.0, math.pi / 2                                    # base facing +y
    ox, oy, oz = target.object_at
    world = (bx - oy, by + ox, oz)                                         # base (x, y) -> odom
    scene = Scene(0.0, "odom", (SceneObject("box", world),))
    assert choose_reach("box", scene, 0.5, [target], FRAMES, (bx, by, yaw)).target == target
    assert choose_reach("box", scene, 0.5, [target], FRAMES, (bx, by, 0.0)).target is None
    assert "frame 'map'" in choose_reach("box", Scene(0.0, "map", scene.objects), 0.5, [target], FRAMES,
                                         (0.0, 0.0, 0.0)).refusal


def test_detections_in_an_unknown_frame_or_malformed_are_input_faults():
    rig = Rig()
    r = rig.router
    assert not r.set_objects(["box"], [(0.7, 0.0, 0.5)], "map", now=0.0)
    assert not r.set_objects(["box", "tool"], [(0.7, 0.0, 0.5)], "base_link", now=0.0)
    assert not r.set_objects(["box"], [(0.7, math.nan, 0.5)], "base_link", now=0.0)
    assert [k for k, _ in rig.faults] == ["objects_frame", "objects_invalid"]    # one line per kind
    assert r.inputs.scene is EMPTY_SCENE
    assert r.set_objects([], [], "base_link", now=0.0) and r.inputs.scene.objects == ()


def test_resolving_arguments_keeps_the_bound_fields_and_the_target_sequence():
    cfg = Rig(plant=False).cfg
    scene = Scene(0.0, "base_link", (SceneObject("tool", cfg.reach_targets[0].object_at),))
    common = dict(zones=cfg.zones, scene=scene, now=0.1, targets=cfg.reach_targets, frames=FRAMES,
                  odom_pose=(0.0, 0.0, 0.0))
    picked = resolve_arguments({"object": "tool"}, cfg.argument_bindings["pick_object"], **common)
    assert picked.fields == {"reach_object": "tool"}
    assert picked.subtasks == ("reach_shelf", "grip_object", "lift_object")
    moved = resolve_arguments({"zone": "door", "speed": 0.2}, cfg.argument_bindings["move_to"], **common)
    assert moved.fields == {"base_goal": "door", "base_speed": 0.2} and moved.subtasks is None and not moved.refusal


def test_back_off_backs_off_the_decided_distance():
    rig = Rig(base=True)
    r = rig.router
    r.submit_decision("back_off", {"distance": 0.35})
    assert rig.run_until(lambda r: r.command.sub_task == "hold", 5.0)
    assert rig.base[0] == pytest.approx(-0.35, abs=0.005)
