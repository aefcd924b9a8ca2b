"""Level 1 as a scene lookup through the plain Router: the variant comes from the camera features
(prototypes of config/scene_keys.yaml plus noise), not from the decision; a scene matching no
variant runs the unknown-scene protocol and is mapped; a confirming decision teaches it; no camera
or a stale frame runs the first variant; two robots sharing one task store stay isolated unless
isolation is off."""
import multiprocessing
import threading
import time

import numpy as np
import pytest

from action_router.interrupts import SOURCE_TASK, SOURCE_UNKNOWN_SCENE
from action_router.task_store import StoredEntry, TaskStore, open_store
from router_rig import Rig

RNG = np.random.default_rng(14)


def scene(rig, kind, noise=0.3):
    """Feature vector of a scene of `kind`: its first prototype plus within-kind noise."""
    return rig.cfg.scene_prototypes[kind][0] + RNG.normal(0.0, noise, 16)


def start(rig, intent, features, args=None, **kw):
    r = rig.router
    rig.step(2)
    if features is not None:
        r.set_vision(features, now=rig.now)
    r.submit_decision(intent, args or {}, now=rig.now, **kw)
    rig.step(2)
    return r.stack.base()


@pytest.mark.parametrize("kind, variant, second", [("door_lever", "lever", "door_handle_grip"),
                                                   ("door_knob", "knob", "grip_knob")])
def test_the_scene_not_the_words_picks_the_open_door_variant(kind, variant, second):
    rig = Rig(zone="door")
    frame = start(rig, "open_door", scene(rig, kind))
    r = rig.router
    assert frame.source == SOURCE_TASK and frame.variant == variant
    assert [r.subtasks[i].name for i in frame.subtasks][:2] == ["approach_handle", second]
    assert r.command.l1_hit and r.level1.unknown_scene_count == 0
    assert any(f"variant {variant}" in line for line in rig.infos)


def test_move_to_goes_around_an_obstacle_it_sees():
    rig = Rig(zone="corridor", base=True)
    frame = start(rig, "move_to", scene(rig, "path_crate"), {"zone": "warehouse", "speed": 0.3})
    assert frame.variant == "around_obstacle" and rig.router.command.sub_task == "detour_crate"
    rig2 = Rig(zone="corridor", base=True)
    assert start(rig2, "move_to", scene(rig2, "path_clear"), {"zone": "warehouse", "speed": 0.3}).variant \
        == "clear_path"


def test_unknown_scene_backs_off_maps_it_and_learns_it_when_confirmed():
    rig = Rig(zone="door", base=True)
    r = rig.router
    unknown = scene(rig, "path_crate", 0.0)       # no door in view: no open_door variant fits
    frame = start(rig, "open_door", unknown)
    assert frame.source == SOURCE_UNKNOWN_SCENE and r.command.sub_task == "retreat_1m" and r.command.base_vx < 0
    assert r.scenes.unknown == 1 and len(r.scenes.map) == 1
    assert r.scenes.map[0]["intent"] == "open_door" and r.scenes.map[0]["zone"] == "door"
    assert r.scenes.map[0]["pose"] == pytest.approx([0.0, 0.0, 0.0], abs=0.01)
    # the same scene again without confirmation: recognised as mapped, not mapped twice
    r.submit_decision("hold_position", now=rig.now)
    rig.step(2)
    requests = []
    r.set_vision(unknown, now=rig.now)
    r.submit_decision("open_door", now=rig.now)
    for _ in range(2):
        rig.step()
        requests += r.command.requests
    assert any("mapped at" in q for q in requests) and len(r.scenes.map) == 1
    # the reasoning node answers the request with the same intent: learned as the first variant
    r.set_vision(unknown, now=rig.now)
    r.submit_decision("open_door", trigger=2, now=rig.now)
    rig.step(2)
    assert any("learned the unknown scene" in line for line in rig.infos)
    assert r.stack.base().source == SOURCE_TASK and r.stack.base().variant == "lever"


def test_without_a_fresh_frame_the_first_variant_runs_as_before():
    rig = Rig(zone="door")
    frame = start(rig, "open_door", None)
    assert frame.variant == "" and rig.router.command.sub_task == "approach_handle"
    assert [rig.router.subtasks[i].name for i in frame.subtasks] == ["approach_handle", "door_handle_grip", "pull_door"]
    rig2 = Rig(zone="door")
    rig2.router.set_vision(scene(rig2, "door_knob"), now=0.0)
    rig2.step(1000)                                   # 1 s later: older than vision_timeout_s
    rig2.router.submit_decision("open_door", now=rig2.now)
    rig2.step(2)
    assert rig2.router.stack.base().variant == "" and rig2.router.level1.unknown_scene_count == 0


@pytest.mark.parametrize("isolation", [True, False])
def test_two_robots_share_one_store_but_never_route_each_others_entries(tmp_path, isolation):
    store = str(tmp_path / "tasks.sqlite")
    params = {"task_store": store, "task_isolation": isolation, "task_store_poll_s": 0.05, "zone": "door"}
    a, b = Rig(robot_id="robot_a", **params), Rig(robot_id="robot_b", **params)
    assert a.router.robot_id != b.router.robot_id
    unknown = scene(a, "path_crate", 0.0)
    start(a, "open_door", unknown)
    a.router.set_vision(unknown, now=a.now)
    a.router.submit_decision("open_door", trigger=2, now=a.now)      # confirmed: learned, stored
    a.step(2)
    a.router.store.sync()
    b.router.store.sync()
    frame = start(b, "open_door", unknown)
    if isolation:
        assert frame.source == SOURCE_UNKNOWN_SCENE and b.router.scenes.foreign_hits == 0
    else:
        assert frame.source == SOURCE_TASK and frame.variant == "lever" and b.router.scenes.foreign_hits == 1
    for rig in (a, b):
        rig.router.close()
    # the store keeps the map and what was learned for the next run
    c = Rig(robot_id="robot_a", **params)
    c.router.store.sync()
    c.step(1)
    assert start(c, "open_door", unknown).variant == "lever"
    c.router.close()


def test_robot_id_defaults_to_the_machine_and_namespace_never_one_literal():
    from action_router.identity import robot_identity
    a, b = robot_identity("", "/robot_a"), robot_identity("", "/robot_b")
    assert a != b and a.endswith("/robot_a") and robot_identity("mac-1", "/x") == "mac-1"
    assert Rig().router.robot_id == robot_identity("", "")


def test_store_sync_waits_for_a_write_the_background_thread_has_in_flight(tmp_path):
    """sync() promises the queue written: rows the background thread took but had not committed
    yet (slowed here) are committed before it returns (CI once read a second store too early)."""
    class SlowWriter(TaskStore):
        def __init__(self, *args, **kwargs):
            self.taken = threading.Event()          # the background thread holds queued rows
            super().__init__(*args, **kwargs)

        def _connect(self):
            if threading.current_thread().name == "task-store" and self.taken.is_set():
                time.sleep(0.3)
            return super()._connect()

        def _flush(self):
            if self._outbox:
                self.taken.set()
            super()._flush()

    path = str(tmp_path / "tasks.sqlite")
    writer, reader = SlowWriter(path, poll_s=10.0), TaskStore(path, poll_s=10.0)
    try:
        writer.put(StoredEntry("robot_a", "open_door", "lever", "learned", np.zeros(4), (0.0, 0.0, 0.0), "door", 1.0))
        assert writer.taken.wait(2.0)
        writer.sync()
        reader.sync()
        assert [e.intent for e in reader.take_new()] == ["open_door"] and writer.written == 1
    finally:
        writer.close()
        reader.close()


def _open_at(path: str, start: float) -> str:
    while time.time() < start:
        pass
    try:
        TaskStore(path, poll_s=10.0).close()
        return "ok"
    except Exception as exc:                      # the failure is the result
        return repr(exc)


def test_robots_starting_together_on_a_new_store_all_open_it(tmp_path):
    """SQLite's busy handler does not cover the switch to WAL: routers opening a new file at the
    same moment got 'database is locked' and one failed to configure (a CI run's two-robot test)."""
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(time.sleep, [0.0] * 4)            # workers up before the first start time
        results = []
        for trial in range(20):
            start = time.time() + 0.05
            results += pool.starmap(_open_at, [(str(tmp_path / f"{trial}.sqlite"), start)] * 4)
    assert results == ["ok"] * 80, sorted(set(results))


def test_a_store_sqlite_cannot_open_is_an_error_naming_the_file(tmp_path):
    with pytest.raises(OSError, match=f"task store {tmp_path}"):
        open_store(str(tmp_path), 0.1)             # a directory
    assert open_store("", 0.1) is None
