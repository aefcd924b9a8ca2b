"""cache_kinds.compare: figures for two recordings of the same probes, checked on known numbers."""
import numpy as np

from csr_llm_core.lab.cache_kinds import compare


def test_compare_counts_agreement_accuracy_and_discordant_probes_exactly():
    hidden = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    full = {"hidden": hidden, "base": np.log(np.array([[0.7, 0.3], [0.2, 0.8], [0.6, 0.4]])),
            "accept": np.array([[True, False], [True, False], [True, True]])}
    window = {"hidden": hidden + np.array([[0.0, 0.0], [0.0, 0.2], [0.0, 0.0]]),
              "base": np.log(np.array([[0.7, 0.3], [0.9, 0.1], [0.4, 0.6]])), "accept": full["accept"]}
    report = compare(full, window, None)
    assert report["probes"] == 3 and report["identical_hidden"] == 2
    assert report["hidden_relative_l2"] == {"median": 0.0, "max": 0.1}
    assert report["chance"] == round(4 / 6, 3)
    # bare choices: full 0, 1, 0 ; window 0, 0, 1 -> same on the first only; right: full 1+0+1, window 1+1+1
    assert report["bare"] == {"same_intent": 0.333, "accuracy_full_size": 0.667, "accuracy_window_only": 1.0,
                              "right_only_full_size": 0, "right_only_window_only": 1}
    assert "adapted" not in report


def test_an_adapter_bias_is_applied_to_both_kinds_alike():
    full = {"hidden": np.array([[1.0], [-1.0]]), "base": np.zeros((2, 2)),
            "accept": np.array([[False, True], [True, False]])}
    window = dict(full, hidden=np.array([[1.0], [1.0]]))
    # weights push intent 1 up when the hidden value is positive
    adapter = (np.array([[0.0], [1.0]]), np.zeros(2), np.zeros(1), np.ones(1))
    report = compare(full, window, adapter)
    assert report["adapted"]["accuracy_full_size"] == 1.0 and report["adapted"]["accuracy_window_only"] == 0.5
    assert report["adapted"]["same_intent"] == 0.5 and report["adapted"]["right_only_full_size"] == 1
