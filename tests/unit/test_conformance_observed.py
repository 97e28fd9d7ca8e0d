"""Recipe conformance observed, not declared: the settings a Megatron log prints at start-up are compared with the
baseline's recipe, each with its line; bundle.yaml's values only where the log prints none, marked declared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clustercert.phases.efficiency import judge_efficiency
from clustercert.verdicts import Check, Status
from tests.unit.phase_bundles import by_id, gb200, parse_all, write_bundle

# the Llama 3 70B FP8 baseline of the GB200 catalog: GBS 2048, sequence 8192, TP 1 PP 1 CP 1, FSDP 512
ARGS = {"tensor_model_parallel_size": "1", "pipeline_model_parallel_size": "1", "context_parallel_size": "1",
        "virtual_pipeline_model_parallel_size": "None", "expert_model_parallel_size": "1",
        "global_batch_size": "2048", "seq_length": "8192", "fp8": "hybrid", "fp8_recipe": "delayed", "bf16": "True",
        "micro_batch_size": "1", "num_layers": "80"}


def megatron_log(args: dict[str, str], prefix: str = "0: [default0]:") -> str:
    """Megatron-LM's argument dump (sorted, dotted as `_print_args` prints it), then 50 iteration records."""
    lines = [f"{prefix}------------------------ arguments ------------------------"]
    lines += [f"{prefix}  {key} {'.' * (48 - len(key))} {value}" for key, value in sorted(args.items())]
    lines.append(f"{prefix}-------------------- end of arguments ---------------------")
    lines += [f"{prefix} [2026-08-20 10:00:{i:02d}] iteration {i:8d}/{50:8d} | consumed samples: {2048 * i:12d} | "
              f"elapsed time per iteration (ms): {7600.0 + 10 * (i % 3):.1f} | learning rate: 1.000000E-05 | "
              f"global batch size:  2048 | lm loss: {11.0 - i / 10:E} | loss scale: 1.0 | grad norm: 1.000 | "
              "number of skipped iterations:   0 | number of nan iterations:   0 |" for i in range(1, 51)]
    return "\n".join(lines) + "\n"


def _line(text: str, key: str) -> int:
    return next(n for n, raw in enumerate(text.splitlines(), start=1) if f" {key} ." in raw)


def _run(**extra: Any) -> dict[str, Any]:
    run = {"id": "l70-r1", "phase": "efficiency", "kind": "training", "format": "megatron", "workload": "llama3-70b",
           "precision": "fp8", "gpus": 512, "gbs": 2048, "seq_len": 8192,
           "parallelism": {"tp": 1, "pp": 1, "cp": 1, "fsdp": 512}, "repeat": 1, "files": ["r1.log"]}
    run.update(extra)
    return run


def _recipe(tmp_path: Path, run: dict[str, Any], text: str) -> Check:
    bundle = write_bundle(tmp_path / "b", [run], {"r1.log": text})
    checks = by_id(judge_efficiency(bundle.spec, gb200(), parse_all(bundle)).checks)  # type: ignore[arg-type]
    return checks["efficiency.l70-r1_recipe_conforms"]


def test_the_values_the_log_prints_are_compared_with_their_lines(tmp_path: Path) -> None:
    text = megatron_log(ARGS)
    recipe = _recipe(tmp_path, _run(), text)
    assert recipe.status is Status.PASS
    tp, gbs, seq = (_line(text, k) for k in ("tensor_model_parallel_size", "global_batch_size", "seq_length"))
    assert f"TP 1 (r1.log:{tp})" in recipe.message and f"GBS 2048 (r1.log:{gbs})" in recipe.message
    assert f"sequence length 8192 (r1.log:{seq})" in recipe.message
    assert f"precision fp8 (r1.log:{_line(text, 'fp8')})" in recipe.message
    # what no Megatron argument says stays bundle.yaml's, marked so
    assert "FSDP 512 (declared)" in recipe.message and "recipe version 25.05.05 (declared)" in recipe.message
    assert (("r1.log", tp, tp, 1) in {(s.file, s.first, s.last, s.count) for s in recipe.evidence})
    # the same values as key/value rows for the report's table (issue 58), each with its origin, under a summary
    settings = dict(recipe.settings)
    assert settings["TP (tp)"] == f"1 (r1.log:{tp})" and settings["FSDP (fsdp)"] == "512 (declared)"
    assert recipe.summary is not None and recipe.summary.startswith(
        f"{len(settings)} recipe values match the baseline's; allowed by the catalog: recipe version")
    assert recipe.to_json()["settings"] == settings


def test_a_printed_tp_other_than_the_recipe_fails_the_comparison_naming_its_line(tmp_path: Path) -> None:
    text = megatron_log({**ARGS, "tensor_model_parallel_size": "4"})
    recipe = _recipe(tmp_path, _run(), text)  # bundle.yaml still says TP 1
    tp = _line(text, "tensor_model_parallel_size")
    assert recipe.status is Status.ERROR
    assert f"TP (tp) 4 vs baseline 1 (the log prints it at r1.log:{tp})" in recipe.message
    assert (f"bundle.yaml declares TP 1 (runs[l70-r1].parallelism.tp) but the log prints 4 at r1.log:{tp}: the log's "
            "value is used") in recipe.message


def test_bundle_and_log_disagreeing_while_the_log_follows_the_recipe_is_a_warning(tmp_path: Path) -> None:
    text = megatron_log(ARGS)
    recipe = _recipe(tmp_path, _run(gbs=1024), text)  # bundle.yaml mistyped; the log printed the recipe's 2048
    assert recipe.status is Status.WARN
    gbs = _line(text, "global_batch_size")
    assert (f"bundle.yaml declares GBS 1024 (runs[l70-r1].gbs) but the log prints 2048 at r1.log:{gbs}: the log's "
            "value is used") in recipe.message


def test_parallelism_printed_by_the_log_needs_no_declaration(tmp_path: Path) -> None:
    run = _run()
    del run["parallelism"]
    recipe = _recipe(tmp_path, run, megatron_log(ARGS))
    # TP, PP, CP, VP, EP, ETP come from the log; FSDP neither printed nor declared is said, not compared
    assert recipe.status is Status.WARN and "FSDP were not compared" in recipe.message
    assert "TP, PP" not in recipe.message


def test_a_log_printing_bf16_only_is_not_an_fp8_run(tmp_path: Path) -> None:
    text = megatron_log({**ARGS, "fp8": "None"})
    recipe = _recipe(tmp_path, _run(), text)
    assert recipe.status is Status.ERROR
    assert f"precision (precision) bf16 vs baseline fp8 (the log prints it at r1.log:{_line(text, 'bf16')})" \
        in recipe.message


def test_the_recipe_table_row_is_compared_where_the_catalog_has_one(tmp_path: Path) -> None:
    """An edition's recipe table fixes more than a baseline does (layers, MBS, FP8 recipe): each printed value is
    compared with the row for the run's precision and GPU count, naming the log's line and the table's source."""
    from clustercert.editions import RecipeConfig
    from clustercert.evidence.bundle import RunSpec
    from clustercert.parsers.megatron import parse_megatron
    from clustercert.phases.conformance import recipe_check

    baseline = next(b for b in gb200().spec.baselines if b.workload == "llama3-70b" and b.precision.value == "fp8")
    row = RecipeConfig(precision="fp8", gpus=512, seq_len=8192, layers=80, tp=1, pp=1, cp=1, mbs=1, gbs=2048,
                       fp8_recipe="cs")  # type: ignore[arg-type]
    run = RunSpec(**_run())  # type: ignore[arg-type]
    fields = ["gbs", "seq_len", "precision", "tp", "pp", "cp", "vp", "ep", "etp", "fsdp"]
    text = megatron_log({**ARGS, "fp8_recipe": "tensorwise"})
    path = tmp_path / "r1.log"
    path.write_text(text)
    good = recipe_check(run, "r1.log", "25.05.05", baseline, fields, parse_megatron(path, "r1.log").settings,
                        (row, "llama3-readme"))
    assert good.status is Status.PASS, good.message
    path.write_text(megatron_log({**ARGS, "fp8_recipe": "tensorwise", "micro_batch_size": "2"}))
    bad = recipe_check(run, "r1.log", "25.05.05", baseline, fields, parse_megatron(path, "r1.log").settings,
                       (row, "llama3-readme"))
    assert bad.status is Status.ERROR
    assert (f"MBS (mbs) 2 vs the recipe table's (llama3-readme: fp8 at 512 GPUs) 1 (the log prints it at "
            f"r1.log:{_line(text, 'micro_batch_size')})") in bad.message
    # Megatron's delayed scaling is not the table's current scaling
    path.write_text(megatron_log(ARGS))
    delayed = recipe_check(run, "r1.log", "25.05.05", baseline, fields, parse_megatron(path, "r1.log").settings,
                           (row, "llama3-readme"))
    assert delayed.status is Status.ERROR and "FP8 recipe (fp8_recipe) delayed vs the recipe table's" in delayed.message


def test_an_empty_cell_of_the_recipe_table_fixes_nothing(tmp_path: Path) -> None:
    """A recipe row that gives no layer count (Kimi-K2's README leaves it empty) is no rule that the log's printed
    num_layers breaks; a size it gives is still compared."""
    from clustercert.editions import RecipeConfig
    from clustercert.evidence.bundle import RunSpec
    from clustercert.parsers.megatron import parse_megatron
    from clustercert.phases.conformance import recipe_check

    baseline = next(b for b in gb200().spec.baselines if b.workload == "llama3-70b" and b.precision.value == "fp8")
    row = RecipeConfig(precision="fp8", gpus=512, seq_len=8192, layers=None, tp=1, pp=1, cp=1, mbs=1, gbs=2048,
                       fp8_recipe="cs")  # type: ignore[arg-type]
    run = RunSpec(**_run())  # type: ignore[arg-type]
    fields = ["gbs", "seq_len", "precision", "tp", "pp", "cp", "vp", "ep", "etp", "fsdp"]
    path = tmp_path / "r1.log"
    path.write_text(megatron_log({**ARGS, "fp8_recipe": "tensorwise", "num_layers": "61"}))
    settings = parse_megatron(path, "r1.log").settings
    assert recipe_check(run, "r1.log", "25.05.05", baseline, fields, settings, (row, "kimi-readme")).status \
        is Status.PASS
    path.write_text(megatron_log({**ARGS, "fp8_recipe": "tensorwise", "num_layers": "61", "micro_batch_size": "4"}))
    settings = parse_megatron(path, "r1.log").settings
    bad = recipe_check(run, "r1.log", "25.05.05", baseline, fields, settings, (row, "kimi-readme"))
    assert bad.status is Status.ERROR and "MBS (mbs) 4 vs the recipe table's" in bad.message
    assert "layers" not in bad.message.split(". Re-run")[0].lower()
