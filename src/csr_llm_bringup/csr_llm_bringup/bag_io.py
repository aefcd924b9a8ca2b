"""Read any rosbag2 (sqlite3 or MCAP, Foxy to Kilted) for replay, reporting what cannot be used.

`inspect_bag` opens a bag folder, a single .db3/.mcap file or a folder of them and checks every
topic: promised versus readable message count (a QoS/metadata mismatch can make a reader yield
nothing without an error), whether the type decodes with the Kilted type store or, for older
recordings without stored definitions, with an older distribution's (Foxy/Humble messages
changed in Jazzy, e.g. sensor_msgs/Range gained `variance`). Unknown or malformed topics are
reported and skipped, never raised.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore

from .bags import typestore

FALLBACK_STORES = (Stores.ROS2_HUMBLE, Stores.ROS2_FOXY)
OK, EMPTY, SHORT, UNDECODABLE, UNREADABLE = "ok", "empty", "short", "undecodable", "unreadable"


class BagError(RuntimeError):
    """The bag cannot be opened at all (missing, not a bag, unsupported format)."""


@dataclass
class TopicReport:
    topic: str
    msgtype: str
    promised: int
    read: int = 0
    decoded: int = 0
    store: str = ""              # type store that decoded it: kilted, ros2_humble, ...
    status: str = OK
    detail: str = ""


@dataclass
class BagReport:
    path: Path
    storage: str
    topics: Dict[str, TopicReport] = field(default_factory=dict)
    problems: List[str] = field(default_factory=list)

    @property
    def usable_topics(self) -> List[str]:
        return [t for t, r in self.topics.items() if r.status == OK]

    def format(self) -> str:
        lines = [f"bag {self.path} ({self.storage})"]
        for report in self.topics.values():
            extra = f" [{report.store}]" if report.store not in ("", "kilted") else ""
            lines.append(f"  {report.status:>11}  {report.topic} {report.msgtype}: read {report.read} of "
                         f"{report.promised}{extra}{' - ' + report.detail if report.detail else ''}")
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


def bag_paths(path: Path) -> List[Path]:
    path = Path(path)
    if not path.exists():
        raise BagError(f"bag {path}: does not exist")
    if path.is_file():
        if path.suffix not in (".db3", ".mcap"):
            raise BagError(f"bag {path}: not a rosbag2 file (.db3 or .mcap)")
        return [path]
    if (path / "metadata.yaml").exists():
        return [path]
    files = sorted(path.glob("*.db3")) + sorted(path.glob("*.mcap"))
    if not files:
        raise BagError(f"bag {path}: no metadata.yaml, .db3 or .mcap inside")
    return files


def _open(paths: Sequence[Path], store) -> AnyReader:
    reader = AnyReader(list(paths), default_typestore=store)
    reader.open()
    return reader


def _store_name(store_enum) -> str:
    return "kilted" if store_enum is None else store_enum.value


def inspect_bag(path: Path, max_decode_per_topic: int = 50) -> BagReport:
    """Open the bag and classify every topic; never raises for bad topics, only for unopenable bags."""
    paths = bag_paths(path)
    storage = "mcap" if any(str(p).endswith(".mcap") or (p.is_dir() and list(p.glob("*.mcap"))) for p in paths) \
        else "sqlite3"
    try:
        reader = _open(paths, typestore())
    except Exception as err:  # rosbags raises several error types for unusable bags
        reason = str(err).splitlines()[0]
        listed = _list_without_definitions(paths, Path(path), storage, reason)
        if listed is None:
            raise BagError(f"bag {path}: cannot be opened: {reason}") from err
        return listed
    report = BagReport(Path(path), storage)
    try:
        for conn in reader.connections:
            entry = report.topics.setdefault(conn.topic, TopicReport(conn.topic, conn.msgtype, 0))
            entry.promised += conn.msgcount
        failures: Dict[str, str] = {}
        for conn, _t, raw in reader.messages():
            entry = report.topics[conn.topic]
            entry.read += 1
            if entry.read > max_decode_per_topic or conn.topic in failures:
                continue
            try:
                reader.deserialize(raw, conn.msgtype)
                entry.decoded += 1
                entry.store = "kilted"
            except Exception as err:
                failures[conn.topic] = str(err).splitlines()[0][:160]
    finally:
        reader.close()
    for topic, reason in failures.items():
        store = _fallback_store(paths, topic)
        entry = report.topics[topic]
        if store is None:
            entry.status, entry.detail = UNDECODABLE, reason
        else:
            entry.store = store.value
    for entry in report.topics.values():
        if entry.status != OK:
            continue
        if entry.read == 0:
            entry.status = EMPTY if entry.promised == 0 else UNREADABLE
            if entry.promised:
                entry.detail = f"metadata promises {entry.promised} messages, the reader yields none"
        elif entry.read < entry.promised:
            entry.status, entry.detail = SHORT, f"only {entry.read} of {entry.promised} messages readable"
    if report.topics and not report.usable_topics:
        report.problems.append("no usable topic")
    return report


def _list_without_definitions(paths: Sequence[Path], path: Path, storage: str, reason: str) -> Optional[BagReport]:
    """When stored definitions cannot be parsed, list the topics with the low-level reader (all undecodable)."""
    from rosbags.rosbag2 import Reader
    if len(paths) != 1 or not Path(paths[0]).is_dir():
        return None
    try:
        with Reader(paths[0]) as reader:
            report = BagReport(path, storage)
            for conn in reader.connections:
                entry = report.topics.setdefault(conn.topic, TopicReport(conn.topic, conn.msgtype, 0))
                entry.promised += conn.msgcount
                entry.status = UNDECODABLE
                entry.detail = "its stored message definition cannot be parsed (e.g. service event types)"
    except Exception:
        return None
    report.problems.append("no usable topic")
    return report


def _fallback_store(paths: Sequence[Path], topic: str):
    for store_enum in FALLBACK_STORES:
        try:
            reader = _open(paths, get_typestore(store_enum))
        except Exception:
            continue
        try:
            for conn, _t, raw in reader.messages(connections=[c for c in reader.connections if c.topic == topic]):
                reader.deserialize(raw, conn.msgtype)
                return store_enum
        except Exception:
            continue
        finally:
            reader.close()
    return None


def read_messages(path: Path, report: BagReport, topics: Optional[Sequence[str]] = None
                  ) -> Iterator[Tuple[str, str, int, bytes, object]]:
    """(topic, msgtype, timestamp ns, raw CDR, decoded or None) in timestamp order, usable topics only.

    `decoded` is set for topics that needed a fallback type store (their raw bytes do not match
    the current message layout and must be converted, not forwarded).
    """
    wanted = [t for t in (topics or report.usable_topics) if t in report.usable_topics]
    by_store: Dict[str, List[str]] = {}
    for topic in wanted:
        by_store.setdefault(report.topics[topic].store or "kilted", []).append(topic)
    paths = bag_paths(path)
    readers = []
    try:
        for store_name, store_topics in by_store.items():
            store = typestore() if store_name == "kilted" else get_typestore(Stores(store_name))
            reader = _open(paths, store)
            readers.append((store_name, reader, [c for c in reader.connections if c.topic in store_topics]))
        streams = [_stream(name, reader, conns) for name, reader, conns in readers]
        import heapq
        for item in heapq.merge(*streams, key=lambda m: m[2]):
            yield item
    finally:
        for _name, reader, _conns in readers:
            reader.close()


def _stream(store_name, reader, conns):
    for conn, timestamp, raw in reader.messages(connections=conns):
        decoded = reader.deserialize(raw, conn.msgtype) if store_name != "kilted" else None
        yield conn.topic, conn.msgtype, timestamp, bytes(raw), decoded


def to_ros_message(decoded, cls):
    """Copy a message decoded with another distribution's types into the current rosidl class.

    Fields that exist on both sides are copied (recursively); fields the old type lacks keep their
    defaults (e.g. sensor_msgs/Range.variance for a Foxy recording).
    """
    import importlib
    msg = cls()
    for (name, _type), slot in zip(cls.get_fields_and_field_types().items(), cls.SLOT_TYPES):
        if not hasattr(decoded, name):
            continue
        value = getattr(decoded, name)
        current = getattr(msg, name)
        if hasattr(current, "get_fields_and_field_types"):
            setattr(msg, name, to_ros_message(value, type(current)))
            continue
        inner = getattr(slot, "value_type", None)
        if inner is not None and hasattr(inner, "namespaces"):      # sequence/array of messages
            inner_cls = getattr(importlib.import_module(".".join(inner.namespaces)), inner.name)
            setattr(msg, name, [to_ros_message(v, inner_cls) for v in value])
        else:
            setattr(msg, name, value.tolist() if hasattr(value, "tolist") else value)
    return msg
