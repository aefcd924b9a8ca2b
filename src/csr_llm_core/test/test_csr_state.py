"""Cached state: exact token bookkeeping, eviction with archive, refused chunks (no model needed)."""
import pytest

from csr_llm_core.csr_state import CachedState, Chunk, ChunkArchive, ChunkRejected, KIND_CONTINUOUS


def chunk(seq, n_tokens, text=None):
    return Chunk(seq, "/joint_states", KIND_CONTINUOUS, text or f"state {seq}", tuple(range(seq, seq + n_tokens)),
                 seq * 0.1)


def test_archive_plus_live_is_every_chunk_in_order_across_evictions(tmp_path):
    archive = ChunkArchive(tmp_path / "archive.jsonl")
    state = CachedState([1, 2, 3], tau_mem=200, evict_ratio=0.5, archive=archive)
    versions = []
    for seq in range(120):
        state.append(chunk(seq, 7 + seq % 5))
        if state.needs_eviction():
            eviction = state.evict()
            versions.append(eviction.state_version)
        assert state.n_tokens == len(state.tokens())
    assert state.counters.evictions >= 5
    assert versions == list(range(1, len(versions) + 1))
    archived = [(row["seq"], tuple(row["tokens"])) for row in archive.read() if row["status"] == "evicted"]
    live = [(c.seq, c.tokens) for c in state.chunks]
    assert [seq for seq, _ in archived + live] == list(range(120))
    assert archived + live == [(c.seq, c.tokens) for c in map(lambda s: chunk(s, 7 + s % 5), range(120))]
    assert state.tokens()[:3] == [1, 2, 3]          # the head never leaves
    assert state.n_tokens < 200


def test_evicts_the_oldest_ratio_and_keeps_the_head(tmp_path):
    state = CachedState([9] * 10, tau_mem=60, evict_ratio=0.25, archive=ChunkArchive(tmp_path / "a.jsonl"))
    for seq in range(5):
        state.append(chunk(seq, 10))
    assert state.needs_eviction()
    eviction = state.evict()
    assert [c.seq for c in eviction.chunks] == [0, 1]        # ceil(5 * 0.25) = 2 oldest
    assert [c.seq for c in state.chunks] == [2, 3, 4]
    assert state.version == 1 and state.n_tokens == 40


def test_refused_chunks_are_archived_and_counted(tmp_path):
    archive = ChunkArchive(tmp_path / "archive.jsonl")
    state = CachedState([1], tau_mem=100, max_chunk_tokens=20, oversize_policy="reject", archive=archive)
    with pytest.raises(ChunkRejected, match="empty"):
        state.append(Chunk(0, "/events", 0, "   ", ()))
    with pytest.raises(ChunkRejected, match="exceed max_chunk_tokens=20"):
        state.append(chunk(1, 50))
    state.append(chunk(2, 5))
    assert state.counters.rejected_chunks == 2
    assert [(r["seq"], r["status"]) for r in archive.read()] == [(0, "rejected"), (1, "rejected")]
    assert [c.seq for c in state.chunks] == [2]


def test_split_policy_cuts_an_oversize_chunk_into_budget_sized_pieces():
    state = CachedState([1], tau_mem=100, max_chunk_tokens=20, oversize_policy="split")
    pieces = state.append(chunk(3, 50), detokenize=lambda tokens: f"{len(tokens)} tokens")
    assert [p.n_tokens for p in pieces] == [20, 20, 10]
    assert [p.part for p in pieces] == [1, 2, 3]
    assert sum((p.tokens for p in pieces), ()) == chunk(3, 50).tokens


def test_snapshot_restore_round_trip():
    state = CachedState([1, 2], tau_mem=100)
    for seq in range(4):
        state.append(chunk(seq, 6))
    state.evict()
    copy = CachedState([1, 2], tau_mem=100)
    copy.restore(state.snapshot())
    assert copy.tokens() == state.tokens() and copy.version == state.version == 1
    with pytest.raises(ValueError, match="another static head"):
        CachedState([7], tau_mem=100).restore(state.snapshot())


def test_each_session_gets_its_own_archive_and_old_ones_are_rotated_out(tmp_path):
    from csr_llm_core.csr_state import ChunkArchive, session_archive_path
    folder = tmp_path / "archive"
    paths = []
    for i in range(5):                               # five sessions, one after the other
        paths.append(session_archive_path(folder, f"20261201-0000{i:02d}-1", keep=3))
        ChunkArchive(paths[-1], {"session": paths[-1].stem, "mode": "asr"})
    assert sorted(p.name for p in folder.glob("*.jsonl")) == [p.name for p in paths[-3:]]
    archive = ChunkArchive(paths[-1])
    assert archive.read() == [] and '"header"' in paths[-1].read_text()
