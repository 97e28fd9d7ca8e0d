"""The `llmb-config_<jobid>.yaml` that llmb-run writes per submitted job: what ran, from which recipe release, and
every way it was told to differ from the recipe (overrides, raw Megatron-Bridge arguments, proxy, profiling)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import MAX_YAML_BYTES, read_regular
from clustercert.yamlio import load_yaml_model, yaml_line_of

__all__ = ["CONFIG_NAME", "LlmbConfig", "config_job_id", "read_llmb_config"]

CONFIG_NAME = re.compile(r"^llmb-config_(?P<job>[0-9]+)\.yaml$")
_HINT = "llmb-run writes this file when it submits the job; re-run the job rather than edit it."


class _Part(BaseModel):
    # llmb-run adds keys between releases: the ones read here are typed, the others kept aside unread
    model_config = ConfigDict(extra="ignore", frozen=True)


class _JobInfo(_Part):
    job_id: int | str
    user: str | None = None
    launcher_type: str | None = None
    launch_time: str | None = None
    experiment_id: str | None = None

    @field_validator("job_id")
    @classmethod
    def _digits(cls, value: int | str) -> int | str:
        if not str(value).isdigit():
            raise ValueError("a Slurm job id is digits")
        return value


class _WorkloadInfo(_Part):
    framework: str = Field(min_length=1)
    gsw_version: str = Field(min_length=1)
    fw_version: str | None = None
    workload_type: str | None = None
    synthetic_dataset: bool | None = None


class _ModelInfo(_Part):
    model_name: str = Field(min_length=1)
    model_size: str | None = None
    dtype: str = Field(min_length=1)
    scale: int = Field(gt=0)
    gpu_type: str = Field(min_length=1)


class _ClusterInfo(_Part):
    cluster_name: str | None = None
    gpus_per_node: int | None = Field(default=None, gt=0)


class _ContainerInfo(_Part):
    images: list[str] = Field(default_factory=list)


class _JobConfig(_Part):
    profile_enabled: bool = False
    proxy: bool = False
    strong_scaling: bool = False
    env_overrides: dict[str, Any] | None = None
    model_overrides: dict[str, Any] | None = None
    mbridge_args: list[Any] | None = None


class _File(_Part):
    job_info: _JobInfo
    workload_info: _WorkloadInfo
    model_info: _ModelInfo
    cluster_info: _ClusterInfo = Field(default_factory=_ClusterInfo)
    container_info: _ContainerInfo = Field(default_factory=_ContainerInfo)
    job_config: _JobConfig = Field(default_factory=_JobConfig)


@dataclass(frozen=True)
class LlmbConfig:
    """One job's llmb-config, with the line of each value a check may name (`lines`, by dotted key)."""

    file: str
    job_id: str
    user: str | None
    launch_time: str | None
    framework: str
    release: str  # workload_info.gsw_version: the recipe release (release.yaml's llmb_version)
    fw_version: str | None  # the container's tag
    model_name: str
    model_size: str | None
    dtype: str
    scale: int
    gpu_type: str
    cluster_name: str | None
    gpus_per_node: int | None
    images: tuple[str, ...]
    profile_enabled: bool
    proxy: bool
    strong_scaling: bool
    env_overrides: dict[str, Any] = field(default_factory=dict)
    model_overrides: dict[str, Any] = field(default_factory=dict)
    mbridge_args: tuple[str, ...] = ()
    lines: dict[str, int] = field(default_factory=dict)

    def line(self, key: str) -> int | None:
        return self.lines.get(key)


def config_job_id(name: str) -> str | None:
    """The Slurm job id an `llmb-config_<jobid>.yaml` file name carries (None for another name)."""
    found = CONFIG_NAME.match(name)
    return found["job"] if found else None


_LINED = ("job_info.job_id", "workload_info.gsw_version", "workload_info.fw_version", "model_info.dtype",
          "model_info.scale", "model_info.gpu_type", "container_info.images", "job_config.profile_enabled",
          "job_config.proxy", "job_config.env_overrides", "job_config.model_overrides", "job_config.mbridge_args")


def _key_line(node: yaml.Node | None, keys: list[str]) -> int | None:
    """1-based line of the last key of `keys` (where `key:` is written, a block value starting below it)."""
    parent = yaml_line_of(node, keys[:-1]) if len(keys) > 1 else None
    for key in keys[:-1]:
        if not isinstance(node, yaml.MappingNode):
            return parent
        node = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
    if not isinstance(node, yaml.MappingNode):
        return parent
    found = next((k for k, _ in node.value if getattr(k, "value", None) == keys[-1]), None)
    return found.start_mark.line + 1 if found is not None else None


def read_llmb_config(path: Path, display: str | None = None) -> LlmbConfig:
    """Parse one llmb-config file; an EvidenceError names its file, line and key when it cannot be used."""
    shown = display or str(path)
    parsed = load_yaml_model(path, _File, EvidenceError, display=shown, hint=_HINT)
    # the file was bounded and validated just now: composing it again only finds each value's line
    node = yaml.compose(read_regular(path, shown, limit=MAX_YAML_BYTES).decode("utf-8"), Loader=yaml.SafeLoader)
    lines = {key: line for key in _LINED if (line := _key_line(node, key.split("."))) is not None}
    job_id = str(parsed.job_info.job_id)
    named = config_job_id(Path(shown).name)
    if named is not None and named != job_id:
        raise EvidenceError(shown, f"expected job_info.job_id to be the job id the file name carries ({named}), "
                            f"got {job_id}. {_HINT}", line=lines.get("job_info.job_id"), field="job_info.job_id")
    jc = parsed.job_config
    return LlmbConfig(
        file=shown, job_id=job_id, user=parsed.job_info.user, launch_time=parsed.job_info.launch_time,
        framework=parsed.workload_info.framework, release=parsed.workload_info.gsw_version,
        fw_version=parsed.workload_info.fw_version, model_name=parsed.model_info.model_name,
        model_size=parsed.model_info.model_size, dtype=parsed.model_info.dtype.lower(),
        scale=parsed.model_info.scale, gpu_type=parsed.model_info.gpu_type.lower(),
        cluster_name=parsed.cluster_info.cluster_name, gpus_per_node=parsed.cluster_info.gpus_per_node,
        images=tuple(parsed.container_info.images), profile_enabled=jc.profile_enabled, proxy=jc.proxy,
        strong_scaling=jc.strong_scaling, env_overrides=dict(jc.env_overrides or {}),
        model_overrides=dict(jc.model_overrides or {}), mbridge_args=tuple(str(a) for a in jc.mbridge_args or ()),
        lines=lines,
    )
