"""A DAgger round's recorded runs as a small committed file, so the adapter refits from the repository.

The intent adapter learns from runs of generated scenarios through the lockstepped graph, each
round decided by the adapter of the round before: a round cannot be run again (the adapter that
decided it is gone once the next is fitted), and its bags (~10 MB a run) do not belong in git. What
the fit reads from a run is text: the chunks its prefix held at each scored decision, the router's
report of the running and paused task, the accepted intents. That is what a probe file keeps
(gzipped JSON, ~17 KB for a round of 24 runs, byte-identical for the same runs), one file per round:

    python -m csr_llm_core.lab.live_probe_files build/intent_adapter/rounds/seed6 --out ROUND_FILE
    python -m csr_llm_core.lab.live_probe_files ROUND_FILE            # what a file holds

`intent_adapter_build --live-probes` reads these files as it reads run folders (the same probes:
test_bench_decisions_live checks it on a real run). Plain module (no rclpy).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from ..aggregator import ChunkOut
from csr_llm_common.catalogue import PausedTask
from .decision_situations import Probe, Stream

FORMAT = "csr-llm-live-probes/1"
ROUNDS_DIR = Path(__file__).resolve().parents[1] / "data" / "intent_adapter_rounds"


def committed_rounds() -> List[Path]:
    """The probe files shipped with the package, in name order."""
    return sorted(ROUNDS_DIR.glob("*.json.gz"))


def _run_record(name: str, stream: Stream, decided: Sequence[str], after_eviction: Sequence[bool]) -> Dict[str, Any]:
    last = max((position for position, _ in stream.probes), default=0)
    probes = []
    for (position, probe), intent, evicted in zip(stream.probes, decided, after_eviction):
        paused = {"intent": probe.paused.intent, "arguments": dict(probe.paused.arguments)} if probe.paused else None
        probes.append({"position": position, "accept": sorted(probe.accept), "running": probe.running,
                       "paused": paused, "note": probe.note, "decided": intent, "after_eviction": bool(evicted)})
    chunks = [[c.seq, c.stamp, c.source_topic, c.kind, c.text] for c in stream.chunks[:last]]
    return {"name": name, "chunks": chunks, "probes": probes}


def export(run_dirs: Sequence[Path], decided_with: Dict[str, Any]) -> Dict[str, Any]:
    """The probe-file content of these run folders (each `<scenario>/latest` or a run folder)."""
    from .live_episodes import run_stream
    runs = []
    for run in run_dirs:
        if not ((run / "decisions.json").exists() and (run / "bag").exists()):
            continue
        recorded = run_stream(run)
        if recorded.stream.probes:
            name = run.parent.name if run.name == "latest" else run.name
            runs.append(_run_record(name, recorded.stream, recorded.decided, recorded.after_eviction))
    return {"format": FORMAT, "decided_with": decided_with, "runs": runs}


def write(path: Path, content: Dict[str, Any]) -> None:
    """Gzipped JSON with a fixed header time, so the same runs give the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(content, sort_keys=True, separators=(",", ":")).encode()
    with open(path, "wb") as handle, gzip.GzipFile(fileobj=handle, mode="wb", mtime=0, filename="") as out:
        out.write(raw)


def read(path: Path) -> Dict[str, Any]:
    try:
        content = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a probe file ({err})") from err
    if content.get("format") != FORMAT:
        raise ValueError(f"{path}: format {content.get('format')!r}, expected {FORMAT!r}")
    return content


def run_digest(run: Dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(run, sort_keys=True).encode()).hexdigest()[:16]


def streams(path: Path) -> List[Tuple[str, Stream]]:
    """(run id, stream) per run of a probe file; the id names the file, the run and its content."""
    out = []
    for run in read(path)["runs"]:
        chunks = [ChunkOut(int(seq), float(stamp), source, int(kind), text)
                  for seq, stamp, source, kind, text in run["chunks"]]
        probes = []
        for item in run["probes"]:
            paused = PausedTask(item["paused"]["intent"], dict(item["paused"]["arguments"])) if item["paused"] else None
            probes.append((int(item["position"]), Probe(frozenset(item["accept"]), item["running"], paused=paused,
                                                         note=item["note"])))
        out.append((f"{path.name.split('.')[0]}/{run['name']}@{run_digest(run)}", Stream(chunks, probes)))
    return out


def summary(path: Path) -> Dict[str, Any]:
    content = read(path)
    runs = content["runs"]
    probes = [p for run in runs for p in run["probes"]]
    matched = sum(p["decided"] in p["accept"] for p in probes)
    return {"file": str(path), "decided_with": content["decided_with"], "runs": len(runs), "probes": len(probes),
            "chunks": sum(len(run["chunks"]) for run in runs),
            "live_accuracy": round(matched / len(probes), 3) if probes else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a round's runs folder (<scenario>/latest inside) or a probe file")
    parser.add_argument("--out", type=Path, default=None, help="write the round's probe file here")
    args = parser.parse_args(argv)
    if args.out is None:
        print(json.dumps(summary(args.source), indent=1))
        return 0
    provenance_file = args.source / "decided_with.json"
    provenance = json.loads(provenance_file.read_text()) if provenance_file.exists() else {}
    content = export(sorted(args.source.glob("*/latest")), provenance)
    if not content["runs"]:
        raise SystemExit(f"{args.source}: no run with scored decisions")
    write(args.out, content)
    print(json.dumps(summary(args.out), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
