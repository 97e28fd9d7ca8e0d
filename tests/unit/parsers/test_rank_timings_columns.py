"""Per-rank timings from Parquet are read column by column and never held whole (a 4,096-GPU day is 45.8 M rows):
what the parser, validation and the straggler scoring read from the file equals what the whole table gives, checked
against the table read whole with pyarrow (the oracle), and a file changed after it was parsed is refused."""

from __future__ import annotations

import datetime as dt
import pickle
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import clustercert.validation.tables as tables
from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import RunKind
from clustercert.evidence.guards import forget_reads
from clustercert.evidence.parse import ParsedFile, read_evidence
from clustercert.parsers.rank_timings import parse_rank_timings

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _table(rng: random.Random, ranks: int, steps: int, *, drop: float = 0.0, repeat: bool = False) -> pa.Table:
    """ranks x steps rows in compact types (as the simulator writes them), some rows dropped, some steps re-run."""
    rows = [(r, s, 0) for s in range(steps) for r in range(ranks) if rng.random() >= drop]
    if repeat:
        rows += [(r, s, 1000) for r, s, _ in rows[: len(rows) // 3]]  # the same steps again after a restart, later
    return pa.table({
        "rank": pa.array([r for r, _, _ in rows], pa.int32()),
        "node": pa.array([f"n{r // 4}" for r, _, _ in rows]).dictionary_encode(),
        "gpu": pa.array([r % 4 for r, _, _ in rows], pa.int16()),
        "step": pa.array([s for _, s, _ in rows], pa.int64()),
        "compute_s": pa.array([rng.uniform(0.5, 0.7) for _ in rows], pa.float64()),
        "comm_s": pa.array([rng.uniform(0.0, 0.2) for _ in rows], pa.float64()),
        "timestamp": pa.array([T0 + dt.timedelta(seconds=s + later) for _, s, later in rows],
                              pa.timestamp("us", "UTC")),
        "extra": pa.array([f"x{i}" for i in range(len(rows))]),
    })


def _write(tmp_path: Path, table: pa.Table) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=37)  # many row groups
    return path


def test_parquet_is_read_by_column_and_by_batch_never_held(tmp_path: Path) -> None:
    table = _table(random.Random(1), 8, 25, drop=0.1)
    path = _write(tmp_path, table)
    parsed = parse_rank_timings(path, "t.parquet")
    assert parsed.held is None and parsed.source is not None and parsed.source.path.samefile(path)
    whole = pq.read_table(path)  # the oracle: the file read whole, cast as the schema says
    cast = {"rank": pa.int64(), "node": pa.string(), "gpu": pa.int64(), "step": pa.int64()}
    for name in whole.column_names:
        expected = whole.column(name).cast(cast[name]) if name in cast else whole.column(name)
        assert parsed.column(name).combine_chunks().equals(expected.combine_chunks()), name
    assert parsed.table.to_pylist() == pa.table(
        {n: parsed.column(n) for n in whole.column_names}).to_pylist()
    got = pa.Table.from_batches(list(parsed.batches(["step", "node", "rank"], 10)))
    assert [b.num_rows for b in parsed.batches(["step"], 10)][:-1] == [10] * (whole.num_rows // 10)
    assert got.to_pylist() == parsed.table.select(["step", "node", "rank"]).to_pylist()
    steps = whole.column("step").to_pylist()
    assert (parsed.rows, parsed.ranks, parsed.nodes, parsed.first_step, parsed.last_step) == (
        whole.num_rows, 8, 2, min(steps), max(steps))
    assert parsed.to_json()["head"] == [{**row, "timestamp": row["timestamp"].isoformat(), "row": i}
                                        for i, row in enumerate(parsed.table.slice(0, 5).to_pylist(), start=1)]


def test_the_columns_are_the_bytes_parsed_whatever_happens_to_the_file(tmp_path: Path) -> None:
    """In a certification the parser reads the in-memory copy of the bytes read and hashed, and keeps it open: the
    file replaced or removed on disk changes nothing; bytes that cannot be read again are refused in one line."""
    table = _table(random.Random(2), 4, 5)
    path = _write(tmp_path, table)
    parsed = read_evidence(parse_rank_timings, path, "t.parquet")
    forget_reads()
    expected = pq.read_table(path).column("step").to_pylist()
    path.unlink()
    _write(tmp_path, _table(random.Random(9), 2, 2))  # another table under the same name
    assert parsed.column("step").to_pylist() == expected
    assert sum(b.num_rows for b in parsed.batches(["rank"], 3)) == table.num_rows
    pickled = pickle.loads(pickle.dumps(parsed))  # travels as the table itself
    assert pickled.held is not None and pickled.table.to_pylist() == parsed.table.to_pylist()
    direct = parse_rank_timings(path, "d.parquet")  # parsed from the file itself: its inode is what is read
    path.write_bytes(b"PAR1 not any more")
    with pytest.raises(EvidenceError) as info:
        direct.column("step")
    assert str(info.value).startswith("d.parquet: expected the Parquet table read a moment ago, got: ")
    assert str(info.value).endswith("The bytes parsed could not be read again")


def test_every_column_is_cast_before_a_value_is_checked(tmp_path: Path) -> None:
    """A null rank (checked) and a text timestamp that is no time (cast): the cast is reported, as when the table
    was read whole; the first non-finite row of compute_s and comm_s together is the one named."""
    base = _table(random.Random(3), 2, 3).drop_columns(["extra"])
    ranks = pa.array([None, *base.column("rank").to_pylist()[1:]], pa.int32())
    bad = base.set_column(0, "rank", ranks).set_column(6, "timestamp", pa.array(["soon"] * base.num_rows))
    pq.write_table(bad, tmp_path / "a.parquet")
    with pytest.raises(EvidenceError, match=r"a.parquet field 'timestamp': expected timestamp values, got string"):
        parse_rank_timings(tmp_path / "a.parquet", "a.parquet")
    compute = base.column("compute_s").to_pylist()
    comm = base.column("comm_s").to_pylist()
    compute[4], comm[2] = float("inf"), float("nan")
    odd = base.set_column(4, "compute_s", pa.array(compute)).set_column(5, "comm_s", pa.array(comm))
    pq.write_table(odd, tmp_path / "b.parquet", row_group_size=2)
    with pytest.raises(EvidenceError, match=r"b.parquet line 3 field 'compute_s': expected finite times"):
        parse_rank_timings(tmp_path / "b.parquet", "b.parquet")


def _old_derived(path: Path) -> pd.DataFrame:
    """The validation table as it was built from the whole table (the oracle), with pandas."""
    t = pq.read_table(path)
    rank = np.asarray(t.column("rank").to_numpy(), dtype=np.int64)
    step = np.asarray(t.column("step").to_numpy(), dtype=np.int64)
    stamp = pc.cast(t.column("timestamp"), pa.int64()).to_numpy()
    counts = pd.Series(1, index=pd.MultiIndex.from_arrays([rank, step, stamp])).groupby(level=[0, 1, 2]).transform(
        "size").to_numpy()
    return pd.DataFrame({
        "rank": rank, "gpu": np.asarray(t.column("gpu").to_numpy(), dtype=np.int64), "step": step,
        "compute_s": t.column("compute_s").to_numpy(), "comm_s": t.column("comm_s").to_numpy(),
        "timestamp_s": stamp / 1e6, "key_count": counts.astype(np.int64),
        "_line": np.arange(1, t.num_rows + 1, dtype=np.int64)})


@pytest.mark.parametrize(("seed", "repeat", "copied"), [(4, False, False), (5, True, False), (6, True, True)])
def test_validation_batches_are_the_whole_tables_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int,
                                                      repeat: bool, copied: bool) -> None:
    table = _table(random.Random(seed), 6, 20, drop=0.05, repeat=repeat)
    if copied:  # a row copied as it is (its timestamp too): key_count 2 on both
        table = pa.concat_tables([table, table.slice(7, 1)])
    path = _write(tmp_path, table)
    monkeypatch.setattr(tables, "BATCH_ROWS", 23)
    parsed = ParsedFile("rt", RunKind.RANK_TIMINGS, "t.parquet", "t.parquet", parse_rank_timings(path, "t.parquet"))
    built = tables.rank_timings_table(parsed, 4, None)
    frames = list(built.batches())
    assert [len(f) for f in frames][:-1] == [23] * (table.num_rows // 23)
    got = pd.concat(frames, ignore_index=True)
    pd.testing.assert_frame_equal(got, _old_derived(path), check_exact=True, check_dtype=False)
    assert list(got.dtypes.astype(str)) == ["int64", "int64", "int64", "float64", "float64", "float64", "int64",
                                            "int64"]
    assert (int(got["key_count"].max()) > 1) is copied


@pytest.mark.parametrize("seed", range(6))
def test_the_fewest_ranks_on_any_step_is_what_a_group_by_gives(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    table = _table(rng, rng.randint(1, 9), rng.randint(1, 30), drop=rng.choice([0.0, 0.3]), repeat=seed % 2 == 1)
    path = _write(tmp_path, table)
    parsed = parse_rank_timings(path, "t.parquet")
    per_step = table.group_by("step").aggregate([("rank", "count_distinct")])  # the oracle: what it was
    fewest = pc.min(per_step.column("rank_count_distinct")).as_py()
    step = per_step.column("step")[pc.index(per_step.column("rank_count_distinct"), fewest).as_py()].as_py()
    row = pc.index(table.column("step"), step).as_py() + 1
    assert tables._fewest_ranks_per_step(parsed) == (fewest, row)
