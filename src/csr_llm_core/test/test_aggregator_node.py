"""The aggregator node's parameters: declared from AggregatorConfig and the per-source defaults,
read-only while it runs."""
import pytest
from rclpy.parameter import Parameter

from csr_llm_common.ros.spin import spinning
from csr_llm_core.aggregator import DEFAULT_SOURCES, AggregatorConfig
from csr_llm_core.aggregator_node import AggregatorNode

pytestmark = pytest.mark.dds   # a real node (Fast DDS on loopback)


def test_the_aggregator_declares_its_config_and_sources_read_only():
    with spinning() as spinner:
        node = spinner.create(AggregatorNode, parameter_overrides=[
            Parameter("sources", value=["joint_states", "alarms"]), Parameter("alarms.type", value="event"),
            Parameter("joint_states.period", value=2), Parameter("max_lag_s", value=3)])
        topics = node.aggregator.topics
        assert sorted(topics) == ["alarms", "joint_states"]
        assert topics["joint_states"].spec.period == 2.0
        assert topics["joint_states"].spec.threshold == DEFAULT_SOURCES["joint_states"].threshold
        assert node.aggregator.max_lag_s == 3.0
        assert node.aggregator.max_events_per_window == AggregatorConfig().max_events_per_window
        for name, value in (("watermark_period", 1.0), ("joint_states.period", 0.1)):
            result = node.set_parameters([Parameter(name, value=value)])[0]
            assert not result.successful and "read-only" in result.reason, name


def test_a_source_without_a_type_stops_the_aggregator_with_a_clear_error():
    with spinning() as spinner:
        with pytest.raises(ValueError, match="lidar.type"):
            spinner.create(AggregatorNode, parameter_overrides=[Parameter("sources", value=["lidar"])])
