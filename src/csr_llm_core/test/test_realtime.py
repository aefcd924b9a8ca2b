"""Thread placement: CPU lists, pinning the calling thread, a refused priority is one clear line."""
import os
import threading

import pytest

from csr_llm_common.realtime import parse_cpu_list, pin_threads, raise_priority


def test_cpu_lists_in_taskset_syntax():
    assert parse_cpu_list("1") == {1} and parse_cpu_list("0, 2-3") == {0, 2, 3} and parse_cpu_list("") == set()
    for bad in ("a", "3-1", "-1"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


def test_pinning_applies_to_the_calling_thread_and_the_threads_it_starts():
    available = sorted(os.sched_getaffinity(0))
    result = {}

    def worker():
        result["line"] = pin_threads(str(available[-1]))
        seen = []
        child = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        child.start()
        child.join()
        result["own"], result["child"] = os.sched_getaffinity(0), seen[0]

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert result["line"] == f"threads pinned to CPUs [{available[-1]}]"
    assert result["own"] == result["child"] == {available[-1]}
    assert os.sched_getaffinity(0) == set(available)           # this thread is untouched
    assert pin_threads("") == ""
    assert "not available" in pin_threads("4096") and "ignored" in pin_threads("x")


def test_priority_is_applied_or_refused_with_one_line():
    assert raise_priority(0) == ""
    line = {}

    def worker():
        line["text"] = raise_priority(10, "test thread")
        line["policy"] = os.sched_getscheduler(0)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    if line["policy"] == os.SCHED_FIFO:
        assert line["text"] == "test thread at SCHED_FIFO priority 10"
    else:
        assert "not permitted" in line["text"] or "refused" in line["text"]
        assert "running at normal priority" in line["text"]
