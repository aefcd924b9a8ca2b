"""Router config against the intent catalogue: every intent has a sub-task sequence, every argument is
bound or explicitly listed as unused (logged once at start); anything else is a clear load error."""
import pytest
import yaml

from action_router.params import make_config, repo_config_dir
from action_router.router import Router

DEFAULT = yaml.safe_load((repo_config_dir() / "router_subtasks.yaml").read_text())


def config_with(tmp_path, edit):
    data = yaml.safe_load(yaml.safe_dump(DEFAULT))
    edit(data)
    path = tmp_path / "router_subtasks.yaml"
    path.write_text(yaml.safe_dump(data))
    return {"subtasks_file": str(path)}


def test_unused_arguments_are_logged_once_at_start():
    cfg = make_config()
    assert cfg.unused_arguments == {"move_to": ["zone"], "pick_object": ["object"]}
    infos = []
    Router(cfg, info_report=infos.append)
    unused = [line for line in infos if "accepted but not used" in line]
    assert unused == ["argument move_to.zone is accepted but not used by the router",
                      "argument pick_object.object is accepted but not used by the router"]


def test_an_argument_neither_bound_nor_listed_is_a_load_error(tmp_path):
    overrides = config_with(tmp_path, lambda d: d["unused_arguments"].pop("pick_object"))
    with pytest.raises(ValueError, match=r"pick_object\.object is neither bound .* nor listed under unused_arguments"):
        make_config(overrides)


def test_a_catalogue_intent_without_a_sequence_is_a_load_error(tmp_path):
    overrides = config_with(tmp_path, lambda d: d["intents"].pop("back_off"))
    with pytest.raises(ValueError, match=r"without a sub-task sequence.*back_off"):
        make_config(overrides)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["argument_bindings"].update(move_to={"speed": "warp"}), "binds to unknown fields"),
    (lambda d: d["unused_arguments"].update(back_off=["distance"]), "both bound and listed as unused"),
    (lambda d: d["unused_arguments"].update(stop=["force"]), "does not declare"),
    (lambda d: d["unused_arguments"].update(dance=["style"]), "not a catalogue intent"),
])
def test_bindings_and_unused_lists_must_name_real_arguments(tmp_path, edit, message):
    with pytest.raises(ValueError, match=message):
        make_config(config_with(tmp_path, edit))


def test_the_catalogue_comes_from_the_intents_file():
    cfg = make_config()
    assert set(cfg.catalogue.names) <= set(cfg.intent_sequences)
    assert cfg.catalogue["back_off"].argument("distance").maximum == 1.0
