"""How the simulator reaches its controller, and how commands enter the simulation (plain module, no rclpy).

`CommandIntake` checks effort and cmd_vel commands and hands efforts to the physics thread.
A control link is the simulator's side of lockstep's control steps (lockstep.py): `RemoteControl`
for a router in its own process (commands, decisions and RouterStatus over DDS), `HostedControl`
for a controller node hosted in the simulator's process (hosting.py), ticked by the physics thread.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from csr_llm_common.faults import FaultLog

from ..lockstep import CommandWait, DecisionHandover
from .robot_model import JOINTS
from .simulator import Simulator


class CommandIntake:
    """Effort and base commands into the simulator; a rejected one is counted and the previous kept."""

    def __init__(self, sim: Simulator, joints: Sequence[str], faults: FaultLog):
        self.sim = sim
        self.joints = list(joints)
        self.faults = faults
        self._cmd_index = np.array([self.joints.index(j) for j in JOINTS])   # `joints` order -> JOINTS order
        self._pending_effort: Optional[np.ndarray] = None

    def take_efforts(self, data) -> None:
        if len(data) != len(JOINTS):
            self.faults.record("effort_length", f"effort command with {len(data)} values, expected "
                               f"{len(JOINTS)} ({', '.join(self.joints)}): ignored, previous efforts kept")
            return
        arr, fault = self.sim.check_efforts(np.asarray(data, dtype=float)[self._cmd_index])
        if fault is not None:
            self.faults.record(fault, f"effort command rejected ({fault}): ignored, previous efforts kept")
            return
        self._pending_effort = arr   # reference swap: the physics thread picks it up next step

    def take_twist(self, vx: float, wz: float) -> None:
        fault = self.sim.set_cmd_vel(vx, wz)
        if fault is not None:
            self.faults.record(fault, "cmd_vel with a non-finite value: ignored")

    def apply_pending(self) -> None:
        """In the physics thread, before a step: the newest effort command."""
        pending = self._pending_effort
        if pending is not None:
            self._pending_effort = None
            self.sim.effort_command[:] = pending


class HostedController(Protocol):
    """What the simulator reads from a hosted controller node (the router offers it)."""
    control_active: bool
    last_decision_id: int
    last_tick_time: float
    last_command: object      # .effort, .base_vx, .base_wz


class HostedNode(Protocol):
    node: HostedController
    name: str

    def spin(self, timeout: float) -> None: ...


class RemoteControl:
    """The router in its own process: its commands arrive on topics (`commands`), its RouterStatus
    feeds the handover; waits sleep on an event."""

    def __init__(self, handover: DecisionHandover, commands: CommandWait):
        self.handover = handover
        self.commands = commands

    def idle(self, event: threading.Event, timeout: float) -> None:
        event.wait(timeout)
        event.clear()

    def hold_decisions(self, stop: threading.Event) -> float:
        return self.handover.wait(stop)

    def round_trip(self, t: float, stop: threading.Event) -> None:
        """Once a router reported active, wait for its command of the state at t."""
        if self.handover.router_reports:
            self.commands.wait(t, stop)

    def start(self, timeout: float, stop: threading.Event, log: Callable[[str], None]) -> None:
        if self.commands.timeout > 0 and not self.handover.wait_for_router(timeout, stop):
            log(f"no router_status within {timeout:g} s: starting without control lockstep until a router reports")

    @property
    def waits(self) -> int:
        return self.commands.waits

    @property
    def timeouts(self) -> int:
        return self.commands.timeouts


class HostedControl:
    """A controller node in this process: the physics thread spins it in every wait, ticks it on
    each state and applies its command at once."""

    def __init__(self, hosted: HostedNode, handover: DecisionHandover, intake: CommandIntake, timeout: float):
        self.hosted = hosted
        self.handover = handover
        self.intake = intake
        self.timeout = float(timeout)
        self.waits = self.timeouts = 0

    @property
    def _node(self) -> HostedController:
        return self.hosted.node

    def idle(self, event: threading.Event, timeout: float) -> None:
        self.hosted.spin(timeout)

    def _spin_and_report(self, timeout: float) -> None:
        self.hosted.spin(timeout)
        self.handover.on_router_status(int(self._node.last_decision_id))

    def hold_decisions(self, stop: threading.Event) -> float:
        return self.handover.wait(stop, self._spin_and_report)

    def round_trip(self, t: float, stop: threading.Event) -> None:
        """Spin until the controller ticked the state at t (its joint_states callback), then apply
        its command; after `timeout` wall s go on without it (counted)."""
        if not self._node.control_active:
            return
        self.waits += 1
        deadline = time.monotonic() + self.timeout
        while self._node.last_tick_time < t - 1e-9 and not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.timeouts += 1
                return
            self.hosted.spin(min(remaining, 0.005))
        command = self._node.last_command
        if command is None:
            self.timeouts += 1
            return
        self.intake.take_efforts(command.effort)             # type: ignore[attr-defined]
        self.intake.take_twist(command.base_vx, command.base_wz)   # type: ignore[attr-defined]

    def start(self, timeout: float, stop: threading.Event, log: Callable[[str], None]) -> None:
        """The handover compares the hosted controller's decision ids directly."""
        if not self._node.control_active:
            log(f"hosted node {self.hosted.name} is not active: the simulation runs without its commands")
            return
        self.handover.on_router_status(int(self._node.last_decision_id))

