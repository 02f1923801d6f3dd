"""The id function is a stable contract: its values are pinned here, and the owner rule is checked."""

import bisect
import random

import pytest

from dht.ids import (
    check_bits,
    finger_start,
    finger_starts,
    in_half_open,
    in_open,
    key_id,
    node_id,
    owner_of,
)

GOLDEN = [
    ("", 64, 0),  # MurmurHash3_x64_128 of the empty input with seed 0 is 0
    ("topic", 64, 10535894466821618418),
    ("news/sports", 64, 7216844577606014002),
    ("127.0.0.1:5555", 64, 9165302755413106721),
    ("topic", 8, 146),
    ("topic", 32, 2453079090),
    ("topic", 128, 194352948817070945646077449324135212685),
    ("ünïcode-τ", 64, 2917608923572483244),
]


@pytest.mark.parametrize("key,bits,expected", GOLDEN)
def test_key_id_golden_values(key, bits, expected):
    assert key_id(key, bits) == expected


def test_key_id_is_the_top_bits_of_the_128_bit_hash():
    for key in ("a", "b", "topic/x", "127.0.0.1:6000"):
        full = key_id(key, 128)
        for bits in (8, 16, 32, 64, 100):
            assert key_id(key, bits) == full >> (128 - bits)
            assert 0 <= key_id(key, bits) < 2**bits


def test_node_id_is_key_id_of_the_endpoint():
    assert node_id("127.0.0.1", 5555) == key_id("127.0.0.1:5555") == 9165302755413106721


@pytest.mark.parametrize("bits", [0, 7, 129, -1, True, 64.0])
def test_bad_bits_are_refused(bits):
    with pytest.raises(ValueError):
        check_bits(bits)


def test_arcs_including_wrap_and_degenerate_arcs():
    assert in_open(5, 3, 8) and not in_open(3, 3, 8) and not in_open(8, 3, 8)
    assert in_open(1, 250, 4) and in_open(255, 250, 4) and not in_open(100, 250, 4)
    assert in_open(7, 5, 5) and not in_open(5, 5, 5)  # (a, a): all but a
    assert in_half_open(8, 3, 8) and not in_half_open(3, 3, 8)
    assert in_half_open(4, 250, 4) and in_half_open(0, 250, 4) and not in_half_open(250, 250, 4)
    assert all(in_half_open(x, 9, 9) for x in (0, 9, 200))  # (a, a]: the whole circle


def test_finger_starts():
    assert finger_starts(0, 8) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert finger_start(250, 3, 8) == (250 + 8) % 256
    with pytest.raises(ValueError):
        finger_start(0, 8, 8)


def test_owner_rule_matches_a_brute_force_scan_over_10k_random_ids():
    rng = random.Random(7)
    bits = 64
    ids = sorted({rng.getrandbits(bits) for _ in range(500)})
    for _ in range(10_000):
        k = rng.getrandbits(bits)
        at_or_after = [n for n in ids if n >= k]
        expected = at_or_after[0] if at_or_after else ids[0]
        assert owner_of(ids, k) == expected
    # an exact hit on a node id is owned by that node; past the largest id it wraps to the smallest
    assert owner_of(ids, ids[3]) == ids[3]
    assert owner_of(ids, ids[-1] + 1) == ids[0]
    assert bisect.bisect_left(ids, 0) == 0
