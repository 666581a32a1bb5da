"""Prefix reuse measured from a Mooncake trace's hash_ids (a small fixture with hits counted by hand)."""
from __future__ import annotations

import pytest

from trimtab.errors import InputError
from trimtab.spec.traces import BlockLRU, curve_sizes, prefix_hit_curve, prefix_stats, read_trace
from tests.prefix.helpers import write_mooncake

ROWS = [  # (ms, input, output, hash_ids); blocks of 512 tokens
    (0, 1024, 10, [1, 2]),        # cold: 0 hit
    (10, 1500, 10, [1, 2, 3]),    # blocks 1, 2 cached: 1024
    (20, 600, 10, [1, 4]),        # block 1: 512 (4 is new)
    (30, 1024, 10, [1, 2]),       # both cached, but the last token is always computed: 1023
    # a prefix match stops at the first miss: 0 (block 2 is cached but follows 5)
    (40, 700, 10, [5, 2]),
]
HIT = 0 + 1024 + 512 + 1023 + 0
TOTAL = 1024 + 1500 + 600 + 1024 + 700


@pytest.fixture
def trace(tmp_path):
    p = tmp_path / "t.jsonl"
    write_mooncake(p, ROWS)
    return read_trace(p, "mooncake")


def test_unbounded_hit_rate_and_working_set(trace):
    st = prefix_stats(trace)
    assert st.hit_tokens == HIT and st.input_tokens == TOTAL
    assert st.hit_rate == pytest.approx(HIT / TOTAL)
    assert st.working_set_tokens == 5 * 512  # distinct blocks 1..5


def test_lru_curve(trace):
    # One block: every request evicts the previous one's blocks before the next arrives; nothing hits.
    # Two blocks: row 1 leaves {1, 2}; row 2 hits 1, 2 (1024) and keeps {2, 3}; row 3 misses 1, keeps {1, 4};
    # row 4 hits 1 (512), misses 2, keeps {1, 2}; row 5 misses 5.
    c = prefix_hit_curve(trace, [512, 1024, 5 * 512, 10**6])
    assert c[0] == 0.0
    assert c[1] == pytest.approx((1024 + 512) / TOTAL)
    assert c[2] == pytest.approx(HIT / TOTAL) and c[3] == pytest.approx(HIT / TOTAL)
    assert list(c) == sorted(c)


def test_block_lru_evicts_least_recent():
    lru = BlockLRU(2 * 512)
    assert lru.serve((1, 2), 1024) == 0
    assert lru.serve((3,), 512) == 0  # evicts 1
    assert lru.serve((1, 2), 1024) == 0  # 1 was evicted: the match stops there
    assert lru.serve((1, 2), 2000) == 1024


def test_curve_sizes_halve_down_to_a_block():
    assert curve_sizes(4096) == (512, 1024, 2048, 4096)
    assert curve_sizes(100) == ()


def test_trace_without_hashes_is_refused(tmp_path):
    p = tmp_path / "t.jsonl"
    write_mooncake(p, [(0, 100, 10, None), (5, 200, 10, None)])
    tr = read_trace(p, "mooncake")
    assert tr.hash_ids is None
    with pytest.raises(InputError, match="no hash_ids"):
        prefix_stats(tr)


def test_malformed_hash_ids_name_the_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
                 '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": "x"}\n')
    with pytest.raises(InputError) as exc:
        read_trace(p, "mooncake")
    assert any(pr.line == 2 and "hash_ids" in pr.message for pr in exc.value.problems)
