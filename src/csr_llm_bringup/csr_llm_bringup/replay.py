"""`csr-llm replay`: feed a bag's input topics to the profile's nodes, record their outputs, compare.

Starts the graph of a profile (default `replay`: aggregator, reasoning, router on sim time) with
the runner, plays the bag's inputs with /clock (lockstepped as the profile's `lockstep:` key says,
the bag player driving it), records what the nodes
publish into <out>/bag, and with `golden` compares against a golden bag's outputs (a golden folder,
golden.py: its bag, with its tolerances.yaml). With `duration` only the bag's first seconds are
played, and the comparison covers what both runs recorded. A bag with /vision_features (a golden)
feeds the router those camera features (vision_source features); one with the depth camera, the
camera itself.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, Union

from rclpy.node import Node

from csr_llm_common.ros.spin import spinning

from .bag_io import BagError, inspect_bag
from .compare import Comparison, compare, read_outputs
from .golden import Tolerances
from .graph import Profile, load_profile
from .lockstep import LockstepSettings
from .player import BagPlayer
from .recorder_node import RecorderNode
from .runner import GraphRunner

FEATURES_TOPIC, CAMERA_TOPIC = "/vision_features", "/camera/depth/image_raw"
INPUT_TOPICS = ["/joint_states", "/imu", "/odom", "/gripper/wrench", "/motor_temperature", "/proximity", "/zone",
                "/events", FEATURES_TOPIC, CAMERA_TOPIC, "/detected_objects"]
OUTPUT_TOPICS = ["/decision", "/motor_command", "/state_chunks", "/csr_status", "/router_status", "/cmd_vel",
                 "/arm_controller/commands", "/decision_request"]
DEFAULT_TOLERANCES = {"arm_shoulder_pan": 2.0, "arm_shoulder_lift": 3.0, "arm_elbow": 2.0, "arm_wrist": 1.0,
                      "gripper": 1.5}


@dataclass
class ReplayOutcome:
    exit_code: int
    out_bag: Path
    report: str
    comparison: Optional[Comparison] = None
    wall_s: float = 0.0


def replay(bag: Path, out_dir: Path, *, profile: str = "replay", rate: float = 1.0, lockstep: Optional[float] = None,
           golden: Optional[Path] = None, tolerances: Union[Tolerances, Mapping[str, float]] = DEFAULT_TOLERANCES,
           inputs: Sequence[str] = INPUT_TOPICS, start_graph: bool = True, log=print,
           settle_s: float = 1.0, overrides: Optional[Mapping[str, Mapping]] = None,
           check_motor: bool = True, duration: Optional[float] = None) -> ReplayOutcome:
    """`golden`: a bag, or a golden folder (its bag; its tolerances.yaml, where `tolerances` is a
    mapping: entries that differ from DEFAULT_TOLERANCES override the folder's joints)."""
    bag = Path(bag)
    wall0 = time.monotonic()
    report = inspect_bag(bag)
    log(report.format())
    golden_bag, tolerances = _golden_and_tolerances(golden, tolerances)
    out_dir.mkdir(parents=True, exist_ok=True)
    runner = None
    settings = LockstepSettings()        # without the graph: nothing to wait for
    if start_graph:
        graph = load_profile(profile, _with_vision_source(overrides, report.topics))
        settings = _player_lockstep(graph, lockstep)
        runner = GraphRunner(graph, out_dir / "params", log_dir=out_dir)
        runner.start()
    try:
        with spinning() as spinner:
            recorder = spinner.create(RecorderNode, parameter_overrides=_params(
                run_dir=str(out_dir), topics=OUTPUT_TOPICS, status_period=0.0, report=False))
            player = BagPlayer(spinner.create(Node, "bag_player"), bag, report, topics=inputs, rate=rate,
                               lockstep=settings, log=log, duration=duration)
            for topic, reason in player.result.skipped.items():
                log(f"skipped {topic}: {reason}")
            if start_graph:
                missing = player.wait_for_subscribers(60)
                if missing:
                    log(f"no subscriber for {', '.join(missing)} (published anyway)")
                _wait_for_decision_subscriber(recorder, 60)
            result = player.play()
            time.sleep(settle_s)
            recorder.close()
            log(f"played {sum(result.published.values())} messages ({result.sim_seconds:.2f} s of bag time); "
                f"decision lockstep waits {result.lockstep_waits}, timeouts {result.lockstep_timeouts}; "
                f"control lockstep timeouts {result.control_timeouts}; "
                f"decision handover timeouts {result.handover_timeouts}")
    finally:
        if runner is not None:
            runner.shutdown()
    out_bag = out_dir / "bag"
    if runner is not None and runner.failed:
        return ReplayOutcome(1, out_bag, f"nodes failed during the replay: {', '.join(runner.failed)}")
    if golden_bag is None:
        return ReplayOutcome(0, out_bag, "recorded; nothing to compare", wall_s=time.monotonic() - wall0)
    comparison = compare(read_outputs(golden_bag), read_outputs(out_bag), tolerances, check_motor=check_motor)
    (out_dir / "compare.txt").write_text(comparison.report() + "\n")
    return ReplayOutcome(0 if comparison.ok else 1, out_bag, comparison.report(), comparison,
                         time.monotonic() - wall0)


def _golden_and_tolerances(golden: Optional[Path], tolerances: Union[Tolerances, Mapping[str, float]]):
    """(the golden's bag, the tolerances to compare with) for a bag or a golden folder."""
    if golden is None or isinstance(tolerances, Tolerances) or not (Path(golden) / "golden.yaml").is_file():
        return golden, tolerances
    folder = Path(golden)
    from .golden import load_golden
    found = load_golden(folder.name, folder.parent)
    tol = found.tolerances()
    tol.joints.update({k: float(v) for k, v in tolerances.items() if DEFAULT_TOLERANCES.get(k) != v})
    return found.require_bag(), tol


def _with_vision_source(overrides: Optional[Mapping[str, Mapping]], topics: Mapping) -> Dict[str, Dict]:
    """The router reads the camera features a golden holds (unless the caller chose a source)."""
    merged: Dict[str, Dict] = {node: dict(params) for node, params in (overrides or {}).items()}
    router = merged.setdefault("action_router", {})
    if "vision_source" not in router:
        if FEATURES_TOPIC in topics:
            router["vision_source"] = "features"
        elif CAMERA_TOPIC in topics:
            router["vision_source"] = "camera"
    if not router:
        del merged["action_router"]
    return merged


def _player_lockstep(graph: Profile, period: Optional[float]) -> LockstepSettings:
    """The profile's lockstep for the bag player (`period` given: that period instead; 0 = off)."""
    settings = graph.lockstep
    if period is not None:
        settings = dataclasses.replace(settings, period=float(period))
    return settings if settings.enabled else LockstepSettings()


def _params(**values):
    from rclpy.parameter import Parameter
    return [Parameter(name, value=value) for name, value in values.items()]


def _wait_for_decision_subscriber(node: Node, timeout: float) -> None:
    """The router (the decision consumer) is up once it subscribes; reasoning once it publishes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node.count_publishers("/decision") and node.count_subscribers("/decision"):
            return
        time.sleep(0.1)


__all__ = ["replay", "ReplayOutcome", "BagError", "INPUT_TOPICS", "OUTPUT_TOPICS", "DEFAULT_TOLERANCES"]
