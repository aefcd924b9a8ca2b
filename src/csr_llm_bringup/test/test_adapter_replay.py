"""adapter_replay: every adapter decides the same recorded probes; scores per scenario are exact."""
import numpy as np
import pytest

from csr_llm_bringup.lab.adapter_replay import load_weights, scenario_counts, summarize, table


def _probes():
    # two intents; scenario a: 3 probes, scenario b: 2; the bare model prefers intent 0 everywhere
    accept = np.array([[1, 0], [0, 1], [0, 1], [1, 0], [0, 1]], dtype=bool)
    hidden = np.array([[0.0], [1.0], [1.0], [0.0], [1.0]])
    base = np.tile([-0.1, -0.2], (5, 1))
    return {"hidden": hidden, "base": base, "accept": accept, "scenario": ["a"] * 3 + ["b"] * 2}


def test_each_adapter_is_scored_on_the_same_probes_per_scenario():
    data = _probes()
    # standardized z = hidden - 0.5: +0.5 where intent 1 is right; weights push intent 1 there
    follows_hidden = (np.array([[-1.0], [1.0]]), np.zeros(2), np.array([0.5]), np.array([1.0]))
    counts = {"bare": scenario_counts(data), "new": scenario_counts(data, follows_hidden)}
    assert counts["bare"] == {"a": (1, 3), "b": (1, 2)}
    assert counts["new"] == {"a": (3, 3), "b": (2, 2)}
    summary = summarize(counts)
    assert summary["overall"]["bare"] == {"accuracy": 0.4, "scenario_mean": 0.4167, "probes": 5}
    new = summary["overall"]["new"]
    assert new["accuracy"] == 1.0 and new["change"] == 0.6
    low, high = new["change_ci95"]
    assert 0.5 <= low <= high <= 0.67                  # both scenarios improve: every resample does
    assert summary["scenarios"]["a"] == {"bare": 0.3333, "new": 1.0}
    assert "new - bare: +0.600" in table(summary)


def test_an_adapter_fitted_to_another_question_is_refused(tmp_path):
    import json
    path = tmp_path / "a.npz"
    meta = {"model_sha256": "m", "head_sha256": "h", "suffix": {"question": "old"}}
    np.savez(path, weights=np.zeros((2, 1)), bias=np.zeros(2), mean=np.zeros(1), scale=np.ones(1),
             meta=np.array(json.dumps(meta)))
    key = {"model_sha256": "m", "head_sha256": "h", "suffix": {"question": "old"}}
    assert len(load_weights(path, key)) == 4
    with pytest.raises(SystemExit, match="another question"):
        load_weights(path, dict(key, suffix={"question": "new"}))
