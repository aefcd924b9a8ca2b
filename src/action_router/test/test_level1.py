"""Level 1: zone thresholds, unknown-scene protocol on a miss, learning from the confirming
decision, unknown intents rejected without changing what runs (through the router), then level 1
alone (no other level): seeded hits, stage jumps, miss confirmation, learning."""
import numpy as np
import pytest

from action_router.encoder import EncoderConfig, ProjectionKeyEncoder
from action_router.interrupts import SOURCE_TASK, SOURCE_UNKNOWN_SCENE, Frame
from action_router.level1 import Level1
from action_router.params import make_config
from action_router.subtask import SubTask
from router_rig import Rig


def shaken_rig(zone, acc):
    """A rig whose IMU reports a horizontal acceleration `acc` (an unusual scene; while the base drives
    it also reads as a slip, whose reflex these tests of level 1 leave out)."""
    rig = Rig(zone=zone, without_reflexes=("slip",))
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
    hits_before = r.level1.task_layer.hits
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
    rig = Rig(base=True)
    r = rig.router
    r.submit_decision("back_off", {"distance": 0.1})
    rig.step(5)
    assert r.command.sub_task == "reverse" and r.command.base_vx == pytest.approx(-0.2)
    assert rig.run_until(lambda r: r.command.sub_task == "hold", 2.0)      # 0.1 m at 0.2 m/s, then idle hold
    assert rig.base[0] == pytest.approx(-0.1, abs=0.005)
    r.submit_decision("move_to", {"zone": "warehouse", "speed": 0.1})
    rig.step(5)
    assert r.command.sub_task == "drive_to_zone" and r.command.base_vx == pytest.approx(0.1, abs=1e-3)


def test_hit_rate_climbs_when_the_same_unusual_scene_recurs(between_acc):
    rig = shaken_rig("corridor", between_acc)
    r = rig.router
    outcomes = []
    for _ in range(3):
        misses = r.level1.unknown_scene_count
        r.submit_decision("open_door", trigger=2)
        rig.step(3)
        outcomes.append(r.level1.unknown_scene_count == misses)
        rig.step(30)
    assert outcomes == [False, True, True]


# ---------------------------------------------------------------- level 1 alone (no other level)
CFG = make_config()
JOINTS = list(CFG.joints)
SUBTASKS = [SubTask(i, name, dict(spec or {}), JOINTS, CFG) for i, (name, spec) in enumerate(CFG.subtasks.items())]
INDEX = {st.name: st.index for st in SUBTASKS}
INTENTS = list(CFG.intent_sequences)
SEQUENCES = [[INDEX[s] for s in CFG.intent_sequences[i]] for i in INTENTS]


def seeded_level1(miss_confirmations=3):
    encoder = ProjectionKeyEncoder(EncoderConfig(n_joints=len(JOINTS)))
    l1 = Level1(SUBTASKS, [INDEX["retreat_1m"], INDEX["freeze"]], "unknown scene: new decision needed",
                64, miss_confirmations, 30.0, 0.95)
    l1.seed(encoder, INTENTS, SEQUENCES, 1.0 / 30.0, len(JOINTS))
    return l1


def open_door_frame():
    ii = INTENTS.index("open_door")
    return Frame(SOURCE_TASK, "open_door", list(SEQUENCES[ii]), intent_index=ii)


def seeded_key(l1, intent, stage):
    ii = INTENTS.index(intent)
    row = [k for k in range(l1.task_layer.count) if l1.task_layer.intent[k] == ii and l1.task_layer.stage[k] == stage]
    return l1.task_layer.keys[row[0]].copy()


def foreign_key(l1):
    rng = np.random.default_rng(5)
    key = seeded_key(l1, "open_door", 0)
    key[:56] = rng.standard_normal(56)
    key[:56] *= np.linalg.norm(seeded_key(l1, "open_door", 0)[:56]) / np.linalg.norm(key[:56])
    return key


def test_level1_alone_hits_the_seeded_key_and_jumps_to_the_stage_it_points_at():
    l1 = seeded_level1()
    frame = open_door_frame()
    out = l1.step(0.0, frame, seeded_key(l1, "open_door", 1), 1, True, True, 0.85, "corridor")
    assert out.matched and out.hit and out.similarity == pytest.approx(1.0) and out.unknown_scene is None
    assert frame.index == 1 and frame.start_key is not None           # the cache pointed at stage 1


def test_level1_alone_a_miss_at_start_runs_the_unknown_scene_protocol_at_once():
    l1 = seeded_level1()
    out = l1.step(0.0, open_door_frame(), foreign_key(l1), 1, True, True, 0.85, "warehouse")
    assert out.matched and not out.hit and out.unknown_scene is not None
    unknown = out.unknown_scene
    assert unknown.frame.source == SOURCE_UNKNOWN_SCENE
    assert unknown.frame.subtasks == [INDEX["retreat_1m"], INDEX["freeze"]]
    assert "intent=open_door" in unknown.request and "sub_task=approach_handle" in unknown.request
    assert "zone=warehouse" in unknown.request and l1.unknown_scene_count == 1


def test_level1_alone_misses_of_a_running_sub_task_need_confirmation_and_a_new_key():
    l1 = seeded_level1(miss_confirmations=3)
    frame = open_door_frame()
    frame.started = True
    key = foreign_key(l1)
    assert l1.step(0.0, frame, key, 1, False, True, 0.85, "corridor").unknown_scene is None
    assert not l1.step(0.01, frame, key, 1, False, True, 0.85, "corridor").matched     # same key version
    assert l1.step(0.03, frame, key, 2, False, True, 0.85, "corridor").unknown_scene is None
    assert l1.step(0.06, frame, key, 3, False, True, 0.85, "corridor").unknown_scene is not None


def test_level1_alone_learns_the_missed_key_when_the_same_intent_is_decided_again():
    l1 = seeded_level1()
    key = foreign_key(l1)
    l1.step(0.0, open_door_frame(), key, 1, True, True, 0.85, "corridor")
    count = l1.task_layer.count
    assert l1.decision_arrived("pick_object", INTENTS.index("pick_object"), 1.0) is None   # other intent
    assert l1.task_layer.count == count
    l1.step(2.0, open_door_frame(), key, 2, True, True, 0.85, "corridor")
    assert "learned the missed scene of open_door/approach_handle" in \
        l1.decision_arrived("open_door", INTENTS.index("open_door"), 3.0)
    assert l1.task_layer.count == count + 1
    out = l1.step(3.1, open_door_frame(), key, 3, True, True, 0.85, "corridor")
    assert out.hit and out.unknown_scene is None
