"""The one decision policy: refuse what the catalogue does not allow, never clamp or default."""
import math

import pytest

from csr_llm_common.catalogue import DecisionError


def test_a_valid_decision_is_typed(catalogue):
    parsed = catalogue.validate("move_to", {"zone": "warehouse", "speed": 0.3})
    assert parsed.intent == "move_to" and parsed.arguments == {"zone": "warehouse", "speed": 0.3}
    assert catalogue.validate("back_off", {"distance": 1}).arguments["distance"] == 1.0   # int for a float


@pytest.mark.parametrize("intent, args, kind", [
    ("fly", {}, "unknown_intent"),
    (None, {}, "unknown_intent"),
    ("stop", {"speed": 0.1}, "unknown_argument"),
    ("move_to", {"zone": "warehouse"}, "missing_argument"),
    ("move_to", {}, "missing_argument"),
    ("move_to", {"zone": "garden", "speed": 0.3}, "bad_argument"),
    ("move_to", {"zone": "warehouse", "speed": 5.0}, "bad_argument"),      # out of range: refused
    ("move_to", {"zone": "warehouse", "speed": math.nan}, "bad_argument"),
    ("move_to", {"zone": "warehouse", "speed": math.inf}, "bad_argument"),
    ("move_to", {"zone": "warehouse", "speed": True}, "bad_argument"),
    ("move_to", {"zone": "warehouse", "speed": "0.3"}, "bad_argument"),
    ("back_off", {"distance": 0.0}, "bad_argument"),
])
def test_refused_decisions_name_their_kind(catalogue, intent, args, kind):
    with pytest.raises(DecisionError) as err:
        catalogue.validate(intent, args)
    assert err.value.kind == kind


def test_refusals_quote_hostile_values_briefly(catalogue):
    with pytest.raises(DecisionError) as err:
        catalogue.validate("x" * 100_000, {})
    assert len(str(err.value)) < 200


def test_the_decoder_clamps_generated_numbers_into_range(catalogue):
    speed = catalogue["move_to"].argument("speed")
    assert speed.clamp(9.0) == 0.5 and speed.clamp(0.0) == 0.05 and speed.clamp(0.2) == 0.2


def test_pausing_intents_pause_the_task_they_displace(catalogue):
    """pauses_task (stop, hold_position, back_off): the displaced task is kept until a task runs."""
    from csr_llm_common.catalogue import CatalogueError, IntentCatalogue, PausedTask
    assert [n for n in catalogue.names if catalogue[n].pauses_task] == ["hold_position", "back_off", "stop"]
    task = PausedTask("move_to", {"zone": "warehouse", "speed": 0.3})
    assert catalogue.paused_after(task, None, "stop") == task
    assert catalogue.paused_after(PausedTask("back_off", {"distance": 0.2}), task, "stop") == task
    assert catalogue.paused_after(None, task, "hold_position") == task
    assert catalogue.paused_after(PausedTask("stop"), task, "open_door") is None
    assert task.text() == "move_to zone=warehouse speed=0.3"
    with pytest.raises(CatalogueError, match="pauses_task must be true or false"):
        IntentCatalogue.from_mapping({"intents": {"stop": {"description": "x", "pauses_task": "yes"}}})
