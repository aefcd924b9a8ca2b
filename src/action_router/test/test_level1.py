"""Level 1: zone thresholds, unknown-scene protocol on a miss, learning from the confirming
decision, unknown intents rejected without changing what runs."""
import numpy as np
import pytest

from action_router.interrupts import SOURCE_TASK, SOURCE_UNKNOWN_SCENE
from router_rig import Rig


def shaken_rig(zone, acc):
    """A rig whose IMU reports a horizontal acceleration `acc` (an unusual scene)."""
    rig = Rig(zone=zone)
    rig.imu_acc = [acc, 0.0, 9.80665]
    rig.imu_gyro = [0.0, 0.0, 0.3]
    return rig


def similarity_for(acc):
    rig = shaken_rig("corridor", acc)
    rig.step(5)
    r = rig.router
    r.key_step.update(rig.now, r.inputs, r.efforts, ("open_door", 0))
    key = np.zeros(64)
    r.key_step.read_latest(key)
    return r.level1.task_layer.match(key, 2.0, count=False)[2]


@pytest.fixture(scope="module")
def between_acc():
    """An IMU acceleration whose key similarity lies between the warehouse and corridor thresholds."""
    for acc in np.linspace(1.0, 12.0, 12):
        if 0.74 < similarity_for(acc) < 0.845:
            return float(acc)
    pytest.fail("no acceleration gives a similarity between 0.72 and 0.85")


def test_zone_thresholds_from_parameters():
    r = Rig().router
    assert r.threshold == 0.85
    r2 = Rig(zone="warehouse").router
    assert r2.threshold == 0.72


def test_corridor_misses_where_the_warehouse_hits(between_acc):
    rig = shaken_rig("corridor", between_acc)
    rig.router.submit_decision("open_door")
    rig.step(2)
    r = rig.router
    assert not r.command.l1_hit and r.level1.unknown_scene_count == 1
    assert r.command.source == SOURCE_UNKNOWN_SCENE and r.command.sub_task == "retreat_1m"
    assert r.command.base_vx < 0                                    # backing off
    rig2 = shaken_rig("warehouse", between_acc)
    rig2.router.submit_decision("open_door")
    requests = []
    for _ in range(2):
        rig2.step()
        requests += rig2.router.command.requests
    assert rig2.router.command.l1_hit and rig2.router.command.source == SOURCE_TASK and requests == []


def test_miss_asks_for_a_decision_holds_and_learns_when_confirmed(between_acc):
    rig = shaken_rig("corridor", between_acc)
    r = rig.router
    r.submit_decision("open_door")
    rig.step(1)
    assert any("unknown scene" in q and "open_door" in q for q in r.command.requests)
    assert rig.run_until(lambda r: r.command.sub_task == "freeze", 10.0)   # backed off 1 m, now holding
    lookups_before, hits_before = r.level1.task_layer.lookups, r.level1.task_layer.hits
    entries = r.level1.task_layer.count
    # the reasoning node answers the request with the same intent: the missed scene is learned
    r.submit_decision("open_door", trigger=2)
    rig.step(2)
    assert r.level1.task_layer.count == entries + 1
    assert r.command.l1_hit and r.command.source == SOURCE_TASK and r.command.sub_task == "approach_handle"
    assert r.level1.task_layer.hits > hits_before and r.level1.unknown_scene_count == 1


def test_zone_topic_switches_threshold_and_rejects_unknown_zones():
    rig = Rig()
    r = rig.router
    assert r.set_zone("warehouse")
    rig.step()
    assert r.zone == "warehouse" and r.threshold == 0.72
    assert not r.set_zone("mars")
    rig.step()
    assert r.zone == "warehouse" and r.faults.counts["zone_unknown"] == 1


def test_unknown_intent_is_rejected_once_logged_and_does_not_change_what_runs():
    rig = Rig()
    r = rig.router
    r.submit_decision("open_door")
    rig.step(100)
    sub = r.command.sub_task
    for _ in range(5):
        assert not r.submit_decision("dance")
        assert not r.submit_decision("move_to", {"zone": "door", "speed": 9.0})   # out of range
        assert not r.submit_decision("pick_object", {"object": "cat"})   # not in the enum
    rig.step(10)
    assert r.command.intent == "open_door" and r.command.sub_task == sub
    kinds = [k for k, _ in rig.faults]
    assert kinds.count("decision_unknown_intent") == 1 and kinds.count("decision_bad_argument") == 1
    assert r.faults.total == 15


def test_arguments_bind_to_the_sub_task():
    rig = Rig()
    r = rig.router
    r.submit_decision("back_off", {"distance": 0.1})
    rig.step(5)
    assert r.command.sub_task == "reverse" and r.command.base_vx == pytest.approx(-0.2)
    assert rig.run_until(lambda r: r.command.sub_task == "hold", 2.0)      # 0.1 m at 0.2 m/s, then idle hold
    r.submit_decision("move_to", {"zone": "door", "speed": 0.1})
    rig.step(5)
    assert r.command.sub_task == "drive" and r.command.base_vx == pytest.approx(0.1)


def test_hit_rate_climbs_when_the_same_unusual_scene_recurs(between_acc):
    rig = shaken_rig("corridor", between_acc)
    r = rig.router
    outcomes = []
    for attempt in range(3):
        misses = r.level1.unknown_scene_count
        r.submit_decision("open_door", trigger=2)
        rig.step(3)
        outcomes.append(r.level1.unknown_scene_count == misses)
        rig.step(30)
    assert outcomes == [False, True, True]
