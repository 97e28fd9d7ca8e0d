"""Small bundles for the hostile corpus, written in tmp_path."""

from __future__ import annotations

from pathlib import Path

HEAD = ("schema_version: 1\ncluster: {name: c, provider: p}\n"
        "system: {gpu: gb200-nvl72, gpus_per_node: 4, nodes: [n1, n2]}\n"
        "catalog: exemplar-gb200\nrecipe_version: '25.05.05'\nruns:\n")
TRAIN = ("  - {{id: {id}, phase: efficiency, kind: training, format: nemo, workload: llama3-70b,"
         " precision: fp8, gpus: 512, gbs: 2048, seq_len: 8192, repeat: {repeat}, files: [{file}]}}\n")
NEMO_LINE = ("Training epoch 0, iteration {i}/19 | lr: 1.4e-07 | global_batch_size: 2048 | global_step: {i} | "
             "reduced_train_loss: 11.03 | train_step_timing in s: 7.6 | consumed_samples: 2048\n")


def write_bundle(root: Path, runs: list[tuple[str, str]] | None = None, *, text: str | None = None) -> Path:
    """A bundle folder with one training run per (id, file); files that do not exist yet get a short NeMo log."""
    root.mkdir(parents=True, exist_ok=True)
    runs = runs if runs is not None else [("llama3-70b-fp8-512-r1", "r1.log")]
    body = HEAD + "".join(TRAIN.format(id=i, file=f, repeat=n) for n, (i, f) in enumerate(runs, start=1))
    for _, rel in runs:
        path = root / rel
        if not path.exists() and not path.is_symlink():
            path.write_text("".join(NEMO_LINE.format(i=i) for i in range(1, 20)))
    (root / "bundle.yaml").write_text(text if text is not None else body)
    return root
