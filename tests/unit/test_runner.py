"""The Slurm runner's domain parts without Slurm: the NumPy model, the socket collectives, the benchmark, plans."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clustercert.parsers.nccl_tests import parse_nccl_tests
from clustercert.runner.collbench import bus_factor, run_test
from clustercert.runner.comm import ProcessGroup, rendezvous_from_env
from clustercert.runner.model import Adam, ModelConfig, corpus, encode, init_params, loss_and_grads, sample_batch
from clustercert.runner.plan import PlanError, load_plan
from clustercert.runner.workload import relative_scores


def test_backward_matches_finite_differences() -> None:
    cfg = ModelConfig(vocab=11, seq_len=6, d_model=8, heads=2, d_ff=12, layers=2)
    rng = np.random.default_rng(3)
    p = {k: v + rng.standard_normal(v.shape) * 0.3 for k, v in init_params(cfg, 1, np.float64).items()}
    x, y = rng.integers(0, 11, (3, 6)), rng.integers(0, 11, (3, 6))
    _, g = loss_and_grads(p, cfg, x, y)
    worst = 0.0
    for k in p:
        for _ in range(3):
            idx = tuple(int(rng.integers(0, s)) for s in p[k].shape)
            old = p[k][idx]
            p[k][idx] = old + 1e-6
            up, _ = loss_and_grads(p, cfg, x, y)
            p[k][idx] = old - 1e-6
            down, _ = loss_and_grads(p, cfg, x, y)
            p[k][idx] = old
            num = (up - down) / 2e-6
            worst = max(worst, abs(num - g[k][idx]) / max(1e-8, abs(num) + abs(g[k][idx])))
    assert worst < 1e-5


def test_untrained_loss_is_uniform_then_falls() -> None:
    cfg = ModelConfig(d_model=32, d_ff=64, layers=1)  # the shipped shape trains the same, slower
    data = encode(corpus(), cfg.vocab)
    p = init_params(cfg, 0)
    opt = Adam(p)
    x, y = sample_batch(data, 8, cfg.seq_len, 0)
    first, _ = loss_and_grads(p, cfg, x, y)
    assert first == pytest.approx(math.log(cfg.vocab), abs=0.05)  # small random weights: near-uniform output
    for step in range(50):
        x, y = sample_batch(data, 8, cfg.seq_len, step)
        loss, g = loss_and_grads(p, cfg, x, y)
        opt.step(p, g)
    assert loss < 0.7 * first


def _in_ranks(world: int, body: Callable[[ProcessGroup], Any], port: int) -> list[Any]:
    out: list[Any] = [None] * world
    errors: list[BaseException] = []

    def one(rank: int) -> None:
        try:
            env = {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), "SLURMD_NODENAME": f"n{rank}"}
            group = ProcessGroup(rendezvous_from_env(env), timeout_s=30)
            out[rank] = body(group)
            group.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return out


def test_socket_collectives_match_numpy() -> None:
    world = 3
    data = [np.random.default_rng(r).standard_normal(10).astype(np.float32) for r in range(world)]
    flat = np.concatenate(data)

    def body(g: ProcessGroup) -> dict[str, Any]:
        mine = data[g.rank]
        return {"ar": g.all_reduce(mine), "rs": g.reduce_scatter(np.tile(mine, world)),
                "ag": g.all_gather(mine), "a2a": g.alltoall(np.repeat(np.arange(world, dtype=np.float32), 2)
                                                            + 10 * g.rank),
                "sr": g.sendrecv((g.rank + 1) % world, mine, (g.rank - 1) % world), "nodes": g.nodes}

    res = _in_ranks(world, body, 29411)
    total = sum(data)
    for r in range(world):
        np.testing.assert_allclose(res[r]["ar"], total, rtol=1e-6)
        np.testing.assert_array_equal(res[r]["ag"], flat)
        np.testing.assert_array_equal(res[r]["sr"], data[(r - 1) % world])
        # chunk r of every rank's input: rank r owns chunk r of the sum (10 elements per chunk)
        np.testing.assert_allclose(res[r]["rs"], total, rtol=1e-6)
        np.testing.assert_array_equal(res[r]["a2a"], np.repeat(10 * np.arange(world, dtype=np.float32) + r, 2))
        assert res[r]["nodes"] == ["n0", "n1", "n2"]


def test_bus_factors_are_nccl_tests() -> None:  # DOMAIN.md section 6
    assert bus_factor("all_reduce", 3) == pytest.approx(4 / 3)
    assert bus_factor("all_gather", 3) == pytest.approx(2 / 3)
    assert bus_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert bus_factor("alltoall", 2) == pytest.approx(1 / 2)
    assert bus_factor("sendrecv", 8) == 1.0


def test_benchmark_output_parses_and_busbw_follows_the_formula(tmp_path: Path) -> None:
    out = _in_ranks(3, lambda g: run_test(g, "all_reduce", [4096, 8192], 1, 2), 29431)
    path = tmp_path / "all_reduce.log"
    path.write_text("\n".join(out[0]), encoding="utf-8")
    result = parse_nccl_tests(path, "all_reduce.log")
    (test,) = result.tests
    assert [r.size_bytes for r in test.rows] == [4096, 8192]
    for row in test.rows:
        algbw = row.size_bytes / (row.time_us_oop * 1e-6) / 1e9
        assert row.algbw_oop == pytest.approx(algbw, rel=0.02, abs=1e-4)
        assert row.busbw_oop == pytest.approx(algbw * 4 / 3, rel=0.02, abs=1e-4)
        assert row.wrong_oop == 0


def test_relative_scores_are_fastest_over_own() -> None:
    assert relative_scores([0.10, 0.20, 0.125]) == pytest.approx([1.0, 0.5, 0.8])


def test_plan_errors_name_line_and_field(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "schema_version: 1\ncluster: {name: c, provider: p}\nsystem: {id: cpu-loopback}\ncatalog: loopback-cpu\n"
        "recipe_version: r\njobs:\n  - id: pairs\n    kind: collective\n    scope: pair\n    nodes: 3\n",
        encoding="utf-8")
    with pytest.raises(PlanError) as info:
        load_plan(plan)
    assert str(info.value).startswith(f"{plan} line 7 field 'jobs[0]': Value error, a pairwise sweep runs on 2 "
                                      "nodes per job, got nodes: 3")


def test_shipped_plan_loads() -> None:
    plan = load_plan(Path(__file__).resolve().parents[2] / "clustercert" / "runner" / "plans" / "loopback.yaml")
    assert [(j.kind.value, j.scope or j.phase) for j in plan.jobs] == [
        ("collective", "full-scale"), ("collective", "cross-rack"), ("collective", "pair"),
        ("training", "efficiency"), ("training", "scaling"), ("training", "scaling"), ("training", "scaling"),
        ("resilience", None)]


def test_pairwise_sweep_is_every_pair_once() -> None:
    from clustercert.runner.execute import expand_jobs

    plan = load_plan(Path(__file__).resolve().parents[2] / "clustercert" / "runner" / "plans" / "loopback.yaml")
    nodes = [f"n{i}" for i in range(5)]
    pairs = [nl for job, nl, _ in expand_jobs(plan, nodes) if job.scope == "pair"]
    assert len(pairs) == 5 * 4 // 2
    assert {frozenset(p or []) for p in pairs} == {frozenset((a, b)) for a in nodes for b in nodes if a < b}


def test_latest_checkpoint_ignores_partial_writes(tmp_path: Path) -> None:
    from clustercert.runner.workload import latest_checkpoint

    for name in ("cc-lm--step=19-consumed_samples=320.npz", "cc-lm--step=39-consumed_samples=640.npz",
                 "cc-lm--step=59-consumed_samples=960.npz.tmp"):
        (tmp_path / name).write_bytes(b"")
    found = latest_checkpoint(tmp_path)
    assert found is not None and found[0] == 39
