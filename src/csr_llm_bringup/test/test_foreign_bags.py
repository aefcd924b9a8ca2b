"""Bags recorded by real ROS 2 tools (Foxy..Kilted, sqlite3 and MCAP) read completely or are reported."""
from pathlib import Path

import pytest

from csr_llm_bringup.bag_io import (BagError, OK, UNDECODABLE, UNREADABLE, inspect_bag, read_messages)

FOREIGN = Path(__file__).resolve().parents[4] / "shared" / "data" / "foreign_bags"
if not FOREIGN.is_dir():
    FOREIGN = Path("/work/shared/data/foreign_bags")
GOOD = {  # folder: {topic: messages}
    "rosbag2_wbag_sqlite3": {t * 3: None for t in "ABCDEFGH"},
    "rosbag2_wbag_mcap": {t * 3: None for t in "ABCDEFGH"},
    "rosbag2_cdr_test_sqlite3": {"/array_topic": 4, "/test_topic": 3},
    "rosbag2_cdr_test_mcap": {"/array_topic": 4, "/test_topic": 3},
    "jalenlv_turtlesim_subset_mcap": {"/turtle1/pose": 2501, "/turtle1/cmd_vel": 18},
    "jalenlv_cmd_vel_mcap": {"/turtle1/cmd_vel": 15},
    "foxglove_chatter_db3": {"/chatter": 7},
}
pytestmark = pytest.mark.skipif(not FOREIGN.is_dir(), reason="shared foreign bags not present")


@pytest.mark.parametrize("folder", sorted(GOOD))
def test_good_bags_read_completely(folder):
    report = inspect_bag(FOREIGN / folder)
    assert set(report.topics) == set(GOOD[folder])
    for topic, expected in GOOD[folder].items():
        entry = report.topics[topic]
        assert entry.status == OK and entry.read == entry.promised
        if expected is not None:
            assert entry.read == expected
    total = sum(1 for _ in read_messages(FOREIGN / folder, report))
    assert total == sum(e.promised for e in report.topics.values())
    stamps = [m[2] for m in read_messages(FOREIGN / folder, report)]
    assert stamps == sorted(stamps)


def test_foxy_bag_without_definitions_decodes_with_the_older_type_store():
    report = inspect_bag(FOREIGN / "CAVEAT_ait_range_foxy_sqlite3")
    entry = report.topics["/range"]
    assert entry.status == OK and entry.store == "ros2_humble" and entry.read == 2
    messages = list(read_messages(FOREIGN / "CAVEAT_ait_range_foxy_sqlite3", report))
    assert len(messages) == 2 and all(m[4] is not None for m in messages)     # decoded for conversion
    assert "[ros2_humble]" in report.format()


def test_service_event_bag_is_reported_not_raised():
    report = inspect_bag(FOREIGN / "CAVEAT_jalenlv_service_events_mcap")
    (entry,) = report.topics.values()
    assert entry.status == UNDECODABLE and entry.promised == 41 and "definition" in entry.detail
    assert report.usable_topics == [] and "no usable topic" in report.format()
    assert list(read_messages(FOREIGN / "CAVEAT_jalenlv_service_events_mcap", report)) == []


def test_bag_whose_metadata_promises_messages_the_reader_cannot_yield():
    report = inspect_bag(FOREIGN / "BAD_rosbag2_talker_sqlite3")
    assert report.topics["/topic"].status == UNREADABLE
    assert "metadata promises 10 messages, the reader yields none" in report.format()
    assert report.usable_topics == []


def test_unsupported_serialization_and_missing_paths_are_clear_errors(tmp_path):
    with pytest.raises(BagError, match="wrong_format"):
        inspect_bag(FOREIGN / "BAD_rosbag2_wrong_rmw_test_sqlite3")
    with pytest.raises(BagError, match="does not exist"):
        inspect_bag(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BagError, match="no metadata.yaml"):
        inspect_bag(tmp_path / "empty")
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    source = FOREIGN / "jalenlv_cmd_vel_mcap"
    for item in source.iterdir():
        data = item.read_bytes()
        (truncated / item.name).write_bytes(data[: len(data) // 2] if item.suffix == ".mcap" else data)
    with pytest.raises(BagError, match="cannot be opened: File end magic is invalid"):
        inspect_bag(truncated)
