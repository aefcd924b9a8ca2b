"""The router's reports by stamp: a decision stamped T reads the newest report stamped before T."""
from csr_llm_common.catalogue import PausedTask
from csr_llm_core.running_task import RunningTask, RunningTaskHistory


def test_a_decision_reads_the_newest_report_stamped_before_it_whatever_the_arrival_order():
    history = RunningTaskHistory(keep_s=10.0)
    assert history.before(1.0) == RunningTask() and history.latest() == RunningTask()
    door = RunningTask("open_door")
    stop = RunningTask("stop", 0, PausedTask("open_door"))
    history.report(2.0, stop)            # arrived before the report it follows
    history.report(0.5, door)
    assert history.before(0.5) == RunningTask()       # a report stamped T is not "before T"
    assert history.before(0.504) == door
    assert history.before(2.0) == door
    assert history.before(2.004) == stop and history.before(2.004).paused == PausedTask("open_door")
    history.report(2.0, RunningTask("back_off", 1))   # the same stamp again: the later report wins
    assert history.before(3.0) == RunningTask("back_off", 1) and history.latest() == RunningTask("back_off", 1)


def test_old_reports_are_dropped_and_time_going_back_starts_afresh():
    history = RunningTaskHistory(keep_s=10.0)
    for t in range(30):
        history.report(float(t), RunningTask("move_to" if t % 2 else "pick_object"))
    assert history.before(25.5) == RunningTask("move_to")
    assert history.before(18.5) == RunningTask()       # older than keep_s behind the newest (29 s)
    history.report(0.2, RunningTask("open_door"))      # a new run: its clock starts again
    assert history.before(20.0) == RunningTask("open_door") and history.before(0.1) == RunningTask()
