"""Reflexes (config/router_subtasks.yaml ``interrupts:``, reflexes.py): each reacts within the tick
its cause appears and resumes the task by itself when the cause clears; no decision either way."""
import math

import pytest

from action_router.interrupts import SOURCE_INTERRUPT, SOURCE_TASK, InterruptStack
from action_router.reflexes import ContactTrigger, ReflexSignals, ReflexSpec, Reflexes, SlipTrigger
from router_rig import Rig


class Watch:
    """Steps a rig and records every decision request the router raised (a reflex raises none)."""

    def __init__(self, rig, force=None):
        self.rig = rig
        self.requests = []
        self.force = force          # gripper force fed each tick instead of the plant's (None: the plant's)

    def step(self, n=1):
        r = self.rig.router
        for _ in range(n):
            if self.force is not None:
                r.set_wrench([0.0, 0.0, self.force], now=self.rig.now)
            self.rig.step()
            self.requests.extend(r.command.requests)
        return r

    def until(self, predicate, max_s):
        end = self.rig.now + max_s
        while self.rig.now < end:
            self.step()
            if predicate(self.rig.router):
                return True
        return False


def test_a_hot_motor_holds_the_task_until_it_cools_then_the_task_resumes_and_finishes():
    rig = Rig()
    w = Watch(rig)
    r = rig.router
    r.submit_decision("open_door")
    w.step(600)
    task = r.stack.base()
    assert r.command.sub_task == "approach_handle"
    r.set_temperature("arm_shoulder_lift", 75.0)
    w.step(1)                                            # the same tick: held, derated
    assert r.command.source == SOURCE_INTERRUPT and r.command.sub_task == "freeze"
    assert r.status().active_reflexes == ("temperature_high",) and r.command.execution_state == 1
    phase = task.phase
    w.step(1000)
    assert r.command.sub_task == "freeze" and task.phase == phase     # holding, the task does not advance
    r.set_temperature("arm_shoulder_lift", 68.0)         # inside the hysteresis band: still hot
    w.step(1000)
    assert r.command.sub_task == "freeze"
    r.set_temperature("arm_shoulder_lift", 60.0)
    w.step(400)                                          # cleared, within the dwell
    assert r.status().active_reflexes == ("temperature_high",)
    assert w.until(lambda r: r.stack.depth == 0, 0.2)
    w.step(1)
    assert r.command.source == SOURCE_TASK and r.command.sub_task == "approach_handle" and r.stack.base() is task
    assert w.until(lambda r: "task open_door complete" in rig.infos, 10.0)
    assert w.requests == [] and r.stack.depth == 0
    assert any(line.startswith("interrupt temperature_high: motor over 70 C") for line in rig.infos)
    assert "interrupt temperature_high cleared: open_door resumes" in rig.infos


def test_a_hold_longer_than_the_sub_tasks_timeout_resumes_it_without_a_timeout():
    """A motor cooling for 8 s held approach_handle (timeout 6 s): its timeout counts the time it ran,
    so the resumed task finishes instead of running the unknown-scene protocol."""
    rig = Rig()
    w = Watch(rig)
    r = rig.router
    r.submit_decision("open_door")
    w.step(600)
    assert r.command.sub_task == "approach_handle"
    r.set_temperature("arm_shoulder_lift", 75.0)
    w.step(8000)
    assert r.command.sub_task == "freeze"
    r.set_temperature("arm_shoulder_lift", 60.0)
    assert w.until(lambda r: r.stack.depth == 0, 1.0)
    assert w.until(lambda r: "task open_door complete" in rig.infos, 10.0)
    assert w.requests == [] and r.status().unknown_scene_count == 0
    assert not any("timed out" in line for line in rig.infos)


def test_a_person_nests_over_the_temperature_hold_and_each_clears_on_its_own():
    rig = Rig()
    w = Watch(rig)
    r = rig.router
    r.submit_decision("open_door")
    w.step(300)
    r.set_temperature("arm_elbow", 80.0)
    w.step(5)
    rig.proximity = 0.2
    w.step(1)
    assert r.status().active_reflexes == ("temperature_high", "person_close", "person_very_close")
    rig.proximity = math.inf
    assert w.until(lambda r: r.status().active_reflexes == ("temperature_high",), 3.0)
    r.set_temperature("arm_elbow", 50.0)
    assert w.until(lambda r: r.command.sub_task == "approach_handle", 1.0)
    assert w.until(lambda r: "task open_door complete" in rig.infos, 10.0) and w.requests == []


def test_a_slip_while_driving_stops_the_base_until_grip_is_regained_then_the_drive_resumes():
    rig = Rig(base=True)
    w = Watch(rig)
    r = rig.router
    r.submit_decision("move_to", {"zone": "warehouse", "speed": 0.3})
    w.step(2000)
    assert r.command.sub_task == "drive_to_zone" and r.command.base_vx > 0.2 and r.stack.depth == 0
    rig.imu_acc = [3.0, 0.0, 9.80665]                    # the base slides on faster than its wheels turn
    pushed = w.until(lambda r: r.stack.depth > 0, 1.0)
    assert pushed and r.status().active_reflexes == ("slip",) and r.key_step.slipping
    assert r.command.sub_task == "freeze" and r.command.base_vx == 0.0 and r.command.base_wz == 0.0
    rig.imu_acc = [0.0, 0.0, 9.80665]                    # the base comes to rest: the wheels agree again
    assert w.until(lambda r: not r.key_step.slipping, 5.0)
    cleared_at = rig.now
    assert w.until(lambda r: r.stack.depth == 0, 1.0) and rig.now - cleared_at >= 0.5 - 1e-6   # the dwell
    w.step(1)
    assert r.command.sub_task == "drive_to_zone" and r.command.source == SOURCE_TASK
    assert w.until(lambda r: r.command.sub_task == "hold", 40.0)      # reached the zone's goal
    assert w.requests == [] and "task move_to complete" in rig.infos


def test_a_slip_while_the_router_does_not_drive_is_no_reflex():
    rig = Rig(base=True)
    w = Watch(rig)
    r = rig.router
    r.submit_decision("hold_position")
    rig.imu_acc = [3.0, 0.0, 9.80665]                    # pushed by hand across a slippery floor
    assert w.until(lambda r: r.key_step.slipping, 3.0)
    w.step(500)
    assert r.stack.depth == 0


def test_an_unexpected_contact_backs_off_holds_and_the_task_resumes_when_the_force_is_gone():
    rig = Rig(base=True)
    rig.feed_wrench = False
    w = Watch(rig, force=0.0)
    r = rig.router
    r.submit_decision("move_to", {"zone": "warehouse", "speed": 0.3})
    w.step(1000)
    assert r.command.base_vx > 0.2
    w.force = 22.0                                       # the arm bumps into something
    w.step(1)
    assert r.status().active_reflexes == ("contact",) and r.command.sub_task == "retreat_5cm"
    assert r.command.base_vx < 0 and "beep" in r.command.sounds
    x_hit = rig.base[0]
    assert w.until(lambda r: r.command.sub_task == "freeze", 2.0)
    assert 0.04 < x_hit - rig.base[0] < 0.07              # backed off 5 cm
    w.force = 12.0                                       # above the clear level (15 - 5 N): still in contact
    w.step(1000)
    assert r.stack.depth == 1
    w.force = 0.0
    w.step(200)
    w.force = 12.0                                       # a brief touch inside the dwell restarts it
    w.step(10)
    w.force = 0.0
    w.step(400)
    assert r.stack.depth == 1
    assert w.until(lambda r: r.stack.depth == 0, 0.2)
    w.step(1)
    assert r.command.sub_task == "drive_to_zone" and r.command.base_vx > 0
    assert w.until(lambda r: r.command.sub_task == "hold", 40.0) and w.requests == []


def test_the_grip_force_of_a_grip_sub_task_is_no_contact_but_a_force_before_the_grip_is():
    rig = Rig()
    w = Watch(rig)
    r = rig.router
    r.submit_decision("open_door")
    depths = []
    while "task open_door complete" not in rig.infos and rig.now < 10.0:
        w.step()
        depths.append(r.stack.depth)
    assert r.grip_done_count == 1 and max(depths) == 0     # gripped, pulled: no contact reflex
    w.step(2000)                                         # holding the handle after the task: none either
    assert r.stack.depth == 0

    rig = Rig()
    rig.feed_wrench = False
    w = Watch(rig, force=0.0)
    r = rig.router
    r.submit_decision("open_door")
    w.step(300)                                          # approaching the handle: no grip yet
    w.force = 20.0
    w.step(1)
    assert r.status().active_reflexes == ("contact",)


def test_no_reflex_fires_while_the_failure_flag_is_set():
    rig = Rig()
    rig.feed_wrench = False
    w = Watch(rig, force=0.0)
    r = rig.router
    r.submit_decision("open_door")
    w.step(300)
    r.levels.fail(rig.now, "test")
    w.force = 25.0
    rig.proximity = 0.2
    r.set_temperature("arm_wrist", 90.0)
    w.step(500)
    assert r.levels.failure and r.stack.depth == 0 and r.status().active_reflexes == ()


def _contact_reflexes(dwell=0.5):
    return Reflexes([ReflexSpec("contact", ContactTrigger(15.0, 5.0), (7, 8), "beep", dwell),
                     ReflexSpec("slip", SlipTrigger(), (8,))])


def test_reflex_triggers_latch_on_rising_edges_and_clear_after_the_dwell():
    reflexes = _contact_reflexes()
    stack = InterruptStack()

    def tick(now, **signals):
        return reflexes.update(ReflexSignals(now, **signals), stack, False, lambda frame: True)

    assert not tick(0.0, force=20.0).changed                       # not armed: no clear reading yet
    tick(0.1, force=0.0)
    up = tick(0.2, force=20.0)
    assert up.changed and up.sounds == ("beep",) and stack.active_interrupts() == ["contact"]
    assert not tick(0.3, force=20.0).changed                       # latched: one frame per edge
    tick(0.4, force=5.0)
    assert not tick(0.8, force=5.0).changed                        # cleared 0.4 s < dwell
    assert tick(0.9, force=5.0).changed and stack.depth == 0
    assert not tick(1.0, force=20.0, gripping=True).changed        # a grip runs: no contact
    assert not tick(1.1, force=20.0).changed                       # the grip ended holding: not armed
    assert tick(1.2, slipping=True, base_driven=True).changed and stack.active_interrupts() == ["slip"]
    assert not tick(1.3, slipping=True).changed


def test_unknown_trigger_kinds_are_refused(tmp_path):
    from action_router.params import make_config
    from csr_llm_common.paths import config_dir
    text = (config_dir() / "router_subtasks.yaml").read_text()
    bad = tmp_path / "router_subtasks.yaml"
    bad.write_text(text.replace("trigger: slip", "trigger: wobble"))
    with pytest.raises(ValueError, match="wobble"):
        make_config({"subtasks_file": str(bad), "scene_keys_file": str(config_dir() / "scene_keys.yaml")})


def test_router_status_message_carries_the_active_reflexes():
    from builtin_interfaces.msg import Time
    from csr_llm_msgs.msg import RouterStatus
    from action_router.router_messages import router_status_message
    if "active_reflexes" not in RouterStatus.get_fields_and_field_types():
        pytest.skip("csr_llm_msgs built before RouterStatus.active_reflexes (make setup rebuilds it)")
    rig = Rig()
    rig.router.submit_decision("hold_position")
    rig.proximity = 0.5
    rig.step(2)
    msg = router_status_message(rig.router.status(), Time(), 1000.0)
    assert list(msg.active_reflexes) == ["person_close"] and msg.interrupt_depth == 1
