"""A scenario says only what the robot cannot sense: narrated files are refused with one line, the
converter drops the narration, and every shipped scenario passes (plain modules, no ROS)."""
from pathlib import Path

import pytest

from csr_llm_bringup.sim.scenario import ScenarioError, load_scenario
from csr_llm_bringup.sim.scenario_convert import convert_file, convert_text, main
from csr_llm_bringup.sim.scenario_format import SENSED

SUITE = Path(__file__).parents[3] / "config" / "scenarios"

NARRATED = """\
# a narrated scenario: the comments stay
name: narrated
duration: 10.0
events:
  - id: task
    at: 1.0
    say: "task: open the door"      # an order
    expect: [open_door]
  - id: person_coming
    at: 2.0
    say: "person approaching"
    person: {approach: 0.4, speed: 1.0}
    expect: [open_door, stop]
    decides: sensed
  - id: person_close
    after: person_coming
    when: {person_distance_below: 0.6}
    say: "person close to the robot ({person_distance:.2f} m)"
    expect: {intents: [open_door, back_off, stop], args: {back_off.distance: {max: 0.5}}}
  - id: notice
    after: task
    when: {zone: door}
    say: "the cleaner is waiting at the door"
    decides: reasoning                # the robot cannot sense who waits
  - id: end
    at: 9.9
    say: "scenario complete"
"""


def test_a_narrated_file_is_refused_with_one_line_naming_file_event_and_fix(tmp_path):
    path = tmp_path / "narrated.yaml"
    path.write_text(NARRATED)
    with pytest.raises(ScenarioError) as err:
        load_scenario(str(path))
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(path))
    assert "event 1 (person_coming)" in message
    assert f"csr-llm scenario convert {path}" in message


def test_the_converter_drops_sensed_lines_keeps_the_rest_and_comments(tmp_path):
    path = tmp_path / "narrated.yaml"
    path.write_text(NARRATED)
    out = tmp_path / "converted.yaml"
    assert main([str(path), "-o", str(out)]) == 0
    assert path.read_text() == NARRATED                     # -o leaves the source alone
    text = out.read_text()
    assert "# a narrated scenario: the comments stay" in text and "# an order" in text
    assert "person approaching" not in text and "person close to the robot" not in text
    scenario = load_scenario(str(out))
    events = {e.id: e for e in scenario.events}
    assert [e.id for e in scenario.events] == ["task", "person_coming", "person_close", "notice", "end"]
    assert events["person_coming"].person == {"approach": 0.4, "speed": 1.0}
    assert events["person_close"].when == {"person_distance_below": 0.6}
    assert events["person_close"].expect.intents == ("open_door", "back_off", "stop")
    assert events["notice"].say == "the cleaner is waiting at the door"      # not sensed: kept
    assert events["task"].say == "task: open the door" and events["end"].say == "scenario complete"
    assert not any(e.say is not None and e.decides == SENSED for e in scenario.events)


def test_conversion_is_idempotent(tmp_path):
    once = convert_text(NARRATED, "narrated.yaml")
    assert [i for i, _ in once.dropped] == ["person_coming", "person_close"] and not once.rewritten
    twice = convert_text(once.text, "narrated.yaml")
    assert twice.text == once.text and not twice.dropped
    path = tmp_path / "s.yaml"
    path.write_text(once.text)
    assert not convert_file(path).dropped and path.read_text() == once.text


def test_a_layout_lines_cannot_drop_is_rewritten_under_a_header():
    flow = "name: f\nevents:\n  - {id: close, when: {person_distance_below: 0.6}, say: close}\n"
    conversion = convert_text(flow, "f.yaml")
    assert conversion.rewritten and conversion.text.startswith("# converted from f.yaml")
    assert "say:" not in conversion.text
    assert convert_text(conversion.text, "f.yaml").text == conversion.text


@pytest.mark.parametrize("path", sorted(SUITE.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_scenario_loads_and_says_nothing_on_a_sensed_event(path):
    scenario = load_scenario(str(path))
    assert not any(e.say is not None and e.decides == SENSED for e in scenario.events)
    assert not convert_text(path.read_text(), str(path)).dropped
