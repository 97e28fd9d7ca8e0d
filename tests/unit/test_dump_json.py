"""results.json and validation.json are written by orjson where it writes what json.dumps(indent=2) writes: the
bytes are compared with the standard library's (the oracle) on random documents, on every magnitude of float and
on strings of every kind of character, and what json refuses is refused the same way."""

from __future__ import annotations

import collections
import enum
import json
import math
import random
import struct
from typing import Any

import pytest

from clustercert.runs.results import dump_json, dump_json_bytes


def _oracle(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def _float(rng: random.Random) -> float:
    while True:
        if rng.random() < 0.5:
            value: float = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        else:
            value = rng.random() * 10.0 ** rng.randint(-12, 20) * rng.choice([1, -1])
        if math.isfinite(value):
            return value


def _text(rng: random.Random) -> str:
    pools = ["abc xyz", '"\\/', "".join(map(chr, range(32))) + "\x7f", "é€😀\u2028\u2029\ufeff",
             '": 1e-05,\n  "x": 0.00001', "e-5 0.0000"]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 12)))


def _document(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.random() if depth < 4 else rng.random() * 0.6
    if kind < 0.25:
        return _float(rng)
    if kind < 0.35:
        return rng.choice([0, -1, 2**53 + 1, -(2**63), 2**64 - 1, True, False, None, 0.0, -0.0, 1e-4, 1e16])
    if kind < 0.6:
        return _text(rng)
    if kind < 0.8:
        return [_document(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {_text(rng): _document(rng, depth + 1) for _ in range(rng.randint(0, 5))}


@pytest.mark.parametrize("seed", range(30))
def test_random_documents_are_written_as_json_writes_them(seed: int) -> None:
    data = _document(random.Random(seed))
    assert dump_json_bytes(data) == _oracle(data)
    assert dump_json(data) == _oracle(data).decode()


def test_every_magnitude_of_float() -> None:
    rng = random.Random(7)
    values = [_float(rng) for _ in range(20_000)] + [10.0 ** e for e in range(-320, 309)] + [5e-324, -5e-324]
    for data in (values, {"v": values}, [{"value": v, "ok": True} for v in values[:2000]]):
        assert dump_json_bytes(data) == _oracle(data)


class _Kind(enum.StrEnum):
    PASS = "PASS"


class _Level(enum.IntEnum):
    HIGH = 3


class _Ratio(float):
    pass


def test_what_orjson_does_not_write_alike_goes_the_json_way() -> None:
    point = collections.namedtuple("point", "x y")
    for data in ({1: "int key", None: 0.5}, [2**70, -(2**65)], [_Ratio(0.00001)], [point(1, 2e-5)],
                 {"kind": _Kind.PASS, "level": _Level.HIGH}, collections.OrderedDict(b=1, a=(1, 2))):
        assert dump_json_bytes(data) == _oracle(data)
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate is no UTF-8, as when json's text was encoded
        dump_json_bytes(["\ud800"])


@pytest.mark.parametrize("bad", [float("nan"), [1.0, float("inf")], {"x": {1, 2}}, object()])
def test_what_json_refuses_is_refused_alike(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError)) as want:
        json.dumps(bad, indent=2, ensure_ascii=False, allow_nan=False)
    with pytest.raises(want.type):
        dump_json_bytes(bad)
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        dump_json_bytes(cycle)
