"""Interrupt stack: insert, nest, resume from the current state; one source per actuator group."""
import numpy as np

from action_router.interrupts import (GROUPS, SOURCE_INTERRUPT, SOURCE_NONE, SOURCE_SAFE_STOP, SOURCE_TASK,
                                      Arbiter, Frame, InterruptStack)
from dataclasses import replace

from builtin_interfaces.msg import Time
from csr_llm_common.catalogue import PausedTask
from csr_llm_common.ros.intent_args import arguments_to_dict

from action_router.router_messages import router_status_message
from router_rig import Rig


def test_stack_order_nesting_and_resume_log():
    s = InterruptStack()
    s.set_base(Frame(SOURCE_TASK, "open_door", [0, 1]))
    s.push(Frame(SOURCE_INTERRUPT, "a", [2]))
    s.push(Frame(SOURCE_INTERRUPT, "b", [3]))
    assert s.depth == 2 and s.top.name == "b"
    s.pop(s.top)
    s.pop(s.top)
    assert list(s.log) == ["base:open_door", "push:a", "push:b", "pop:b", "resume:a", "pop:a", "resume:open_door"]
    assert s.top.needs_resume


def test_a_new_task_slides_under_running_interrupts():
    s = InterruptStack()
    s.set_base(Frame(SOURCE_TASK, "open_door", [0]))
    s.push(Frame(SOURCE_INTERRUPT, "a", [2]))
    s.set_base(Frame(SOURCE_TASK, "pick_object", [1]))
    assert [f.name for f in s.frames] == ["pick_object", "a"] and s.top.name == "a"


def test_arbiter_gives_every_group_exactly_one_source():
    a = Arbiter()
    f = Frame(SOURCE_INTERRUPT, "a", [1])
    assert a.assign(f, False) == {g: SOURCE_INTERRUPT for g in GROUPS}
    assert a.assign(f, True) == {g: SOURCE_SAFE_STOP for g in GROUPS}
    assert a.assign(None, False) == {g: SOURCE_NONE for g in GROUPS}


def test_person_interrupt_nested_interrupt_and_resume_in_the_router():
    rig = Rig()
    r = rig.router
    r.submit_decision("open_door")
    rig.step(600, record=True)                       # 0.6 s into approach_handle
    task = r.stack.base()
    assert r.command.sub_task == "approach_handle"
    # a person comes within 0.5 m: back 10 cm and beep
    rig.proximity = 0.5
    rig.step(1, record=True)
    assert r.command.source == SOURCE_INTERRUPT and r.command.sub_task == "retreat_10cm" and "beep" in r.command.sounds
    phase_at_interrupt = task.phase
    assert 0.55 < phase_at_interrupt < 0.65
    rig.step(200, record=True)
    assert r.command.base_vx < 0 and r.stack.depth == 1
    # closer still: a nested interrupt freezes everything
    rig.proximity = 0.2
    rig.step(1, record=True)
    assert r.stack.depth == 2 and r.command.sub_task == "freeze" and r.command.base_vx == 0.0
    rig.step(100, record=True)
    # back to 0.45 m: the inner interrupt clears, the outer one resumes its retreat
    rig.proximity = 0.45
    rig.step(1, record=True)
    assert r.stack.depth == 1 and r.command.sub_task == "retreat_10cm"
    # the person leaves: once the retreat is done the task resumes where it was
    rig.proximity = float("inf")
    assert rig.run_until(lambda r: r.stack.depth == 0, 3.0, record=True)
    rig.step(1, record=True)
    assert r.command.source == SOURCE_TASK and r.command.sub_task == "approach_handle"
    assert task.phase == phase_at_interrupt         # the template phase was kept
    assert list(r.stack.log)[:7] == ["base:open_door", "push:person_close", "push:person_very_close",
                               "pop:person_very_close", "resume:person_close", "pop:person_close",
                               "resume:open_door"]
    # resumed from the current state: the reference starts at the measured joint positions
    assert np.max(np.abs(r.command.reference_position - rig.plant.q)) < 0.05
    assert rig.run_until(lambda r: r.command.sub_task == "door_handle_grip", 5.0, record=True)
    # every recorded tick: one source for the arm and the base, and the base never drives forward
    # while an interrupt or a stop commands it
    for _, effort, source, _, _, sources in rig.history:
        assert sources["arm"] == sources["base"] == source
        assert np.all(np.isfinite(effort))
    assert r.command.sounds == () and sum(1 for h in rig.history if h[2] == SOURCE_INTERRUPT) > 100


def test_interrupt_sound_is_emitted_once_per_trigger():
    rig = Rig()
    r = rig.router
    r.submit_decision("hold_position")
    rig.step(10)
    rig.proximity = 0.5
    beeps = 0
    for _ in range(300):
        rig.step()
        beeps += r.command.sounds.count("beep")
    assert beeps == 1


def test_a_repeated_decision_confirms_the_running_task_instead_of_restarting_it():
    rig = Rig()
    r = rig.router
    r.submit_decision("open_door")
    rig.step(300)                                   # 0.3 s into approach_handle
    frame = r.stack.base()
    phase_before = (frame.index, frame.run_since)
    for _ in range(5):                              # the reasoning node re-decides at 2 Hz
        r.submit_decision("open_door")
        rig.step(100)
    assert r.stack.base() is frame and (frame.index, frame.run_since) == phase_before
    assert r.repeated_decisions == 5
    r.submit_decision("back_off", {"distance": 0.2})  # a different decision does replace it
    rig.step(1)
    assert r.stack.base().name == "back_off"


def test_a_pausing_decision_keeps_the_task_it_displaces_until_a_task_runs_again():
    """stop / back_off / hold_position (catalogue pauses_task) displacing an unfinished task: the
    status reports that task, with its decided arguments, until a decision runs a task again."""
    rig = Rig(base=True)
    r = rig.router
    r.submit_decision("move_to", {"zone": "warehouse", "speed": 0.3})
    rig.step(200)
    assert r.status().paused is None
    r.submit_decision("back_off", {"distance": 0.2})
    rig.step(5)
    assert r.status().paused == PausedTask("move_to", {"zone": "warehouse", "speed": 0.3})
    for intent in ("stop", "hold_position"):              # a pause on a pause keeps the task
        r.submit_decision(intent)
        rig.step(5)
        assert r.status().paused == PausedTask("move_to", {"zone": "warehouse", "speed": 0.3})
    r.submit_decision("open_door")                       # a task runs: nothing is paused
    rig.step(5)
    assert r.status().paused is None
    msg = router_status_message(replace(r.status(), paused=PausedTask("pick_object", {"object": "tool"})),
                                Time(), 1000.0)
    assert msg.paused_intent == "pick_object" and arguments_to_dict(msg.paused_arguments) == {"object": "tool"}
    assert router_status_message(r.status(), Time(), 1000.0).paused_intent == ""


def test_a_finished_task_is_not_paused():
    rig = Rig()
    r = rig.router
    r.submit_decision("back_off", {"distance": 0.1})
    rig.step(3000)
    assert "task back_off complete" in rig.infos
    r.submit_decision("open_door")
    rig.step(5)
    r.submit_decision("open_door")                       # confirmed, not restarted
    frame = r.stack.base()
    frame.index = len(frame.subtasks)                    # as if its last sub-task completed
    r.submit_decision("stop")
    rig.step(5)
    assert r.status().paused is None
