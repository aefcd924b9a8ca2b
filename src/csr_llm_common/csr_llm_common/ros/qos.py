"""QoS profiles of the suite's topics, in one place so publishers and subscribers always agree."""
from __future__ import annotations

from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data


def reliable(depth: int, *, transient_local: bool = False) -> QoSProfile:
    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if transient_local else DurabilityPolicy.VOLATILE)


def best_effort(depth: int) -> QoSProfile:
    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.BEST_EFFORT, history=HistoryPolicy.KEEP_LAST)


# Commands, decisions, status, simulator sensors: reliable, shallow (a late sample is useless).
COMMANDS = reliable(10)
# Sensor streams of real drivers (best effort, depth 5): what the aggregator and router accept.
SENSORS = qos_profile_sensor_data
# Sensors from a simulator or a bag player (reliable publishers): lossless, deep enough for a burst.
RELIABLE_SENSORS = reliable(200)
# A controller works on the latest joint state only, never through a backlog.
LATEST = best_effort(1)
# rclpy's TimeSource subscribes /clock best effort, depth 1.
CLOCK = best_effort(1)
# The chunk stream must lose nothing and reach late joiners (a restarted reasoning node).
CHUNK_STREAM = reliable(1000, transient_local=True)
# Events are rare and each one matters: deep and reliable.
EVENTS = reliable(1000)
# The simulator's scripted events stay available to nodes that start after them.
SCENARIO_EVENTS = reliable(100, transient_local=True)
# The router's status is latched: a lockstepped simulator or player that subscribes after the
# router activated still learns at once that it ticks (and which decision it holds).
ROUTER_STATUS = reliable(10, transient_local=True)
# Decisions from the reasoning node: reliable, deep enough for a burst while the router starts.
DECISIONS = reliable(1000)
# Recording and replay: deep queues, a bag must not drop what a fast burst publishes.
RECORDING_DEPTH = 2000
PLAYBACK = reliable(RECORDING_DEPTH)


# rclpy gives every publisher and subscription two QoS-event handlers by default (a warning on an
# incompatible QoS or type), waitables its executor walks in Python at every wake-up: on a node with
# 20 subscriptions they doubled the CPU per received message (~950 against ~420 us). Publishers of
# ours, and subscriptions between nodes of ours (their QoS come from this module, so they agree by
# construction), go without them; subscriptions a foreign driver may feed keep the warning.
def quiet_publisher() -> PublisherEventCallbacks:
    return PublisherEventCallbacks(use_default_callbacks=False)


def quiet_subscription() -> SubscriptionEventCallbacks:
    return SubscriptionEventCallbacks(use_default_callbacks=False)
