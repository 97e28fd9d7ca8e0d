"""What `clustercert evidence parse` prints for a node-health file: the units read, with their lines, from the
object `evidence parse --json` prints."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from clustercert.cli.summary import counted

__all__ = ["HEALTH_VIEWS"]


def _gpus(result: dict[str, Any]) -> list[str]:
    gpus: list[dict[str, Any]] = result.get("gpus") or []
    out = [f"{result.get('source')}: {counted(len(gpus), 'GPU')} of {result.get('attached_gpus')} attached, "
           f"driver {result.get('driver_version')}, lines {result.get('line')}-{result.get('last_line')}"]
    if result.get("displayed"):
        out.append(f"limited to: {', '.join(result['displayed'])}")
    for gpu in gpus:
        readings = gpu.get("readings") or {}
        name = (readings.get("name") or {}).get("value") or "GPU"
        out.append(f"  {gpu.get('index')}: {gpu.get('bus_id')} {name} (line {gpu.get('line')}), "
                   f"{counted(len(readings), 'reading')}")
    return out


def _diag(result: dict[str, Any]) -> list[str]:
    tests: list[dict[str, Any]] = result.get("tests") or []
    if result.get("error"):
        return [f"dcgmi diag could not run (line {result.get('error_line')}): {result['error']}"]
    out = [f"{counted(len(tests), 'test')}, {result.get('gpu_count') or 'an unnamed number of'} GPUs, "
           f"DCGM {(result.get('metadata') or {}).get('DCGM Version', 'version not printed')}"]
    for test in tests:
        out.append(f"  {test.get('category')} / {test.get('name')}: {test.get('result')} (line {test.get('line')}"
                   f", {counted(len(test.get('messages') or []), 'message')})")
    return out


def _kernel(result: dict[str, Any]) -> list[str]:
    xids: list[dict[str, Any]] = result.get("xids") or []
    carrier: list[dict[str, Any]] = result.get("carrier") or []
    counts = Counter((x.get("pci"), x.get("xid")) for x in xids)
    out = [f"{counted(len(xids), 'Xid line')}, {counted(len(carrier), 'carrier event')}, "
           f"{result.get('first_stamp')} to {result.get('last_stamp')}"]
    out += [f"  GPU {pci}: Xid {xid} x{n:,}" for (pci, xid), n in sorted(counts.items(), key=lambda kv: str(kv[0]))]
    return out


def _fabric_manager(result: dict[str, Any]) -> list[str]:
    entries: list[dict[str, Any]] = result.get("entries") or []
    levels = ", ".join(f"{level} {n:,}" for level, n in (result.get("levels") or {}).items())
    out = [f"entries by level: {levels}; {result.get('first_stamp')} to {result.get('last_stamp')}"]
    out += [f"  line {e.get('line')}: [{e.get('level')}] {e.get('message')}" for e in entries[:10]]
    return out


def _ports(result: dict[str, Any]) -> list[str]:
    ports: list[dict[str, Any]] = result.get("ports") or []
    out = [f"{result.get('source')}: {counted(len(ports), 'port')}"]
    if result.get("failure"):
        out.append(f"stopped at line {result.get('failure_line')}: {result['failure']}")
    for port in ports:
        rate = "" if port.get("rate_gbps") is None else f" {port['rate_gbps']:g} Gb/s"
        out.append(f"  {port.get('ca')} port {port.get('port')}: {port.get('state')}/{port.get('physical_state')}"
                   f"{rate} {port.get('link_layer') or ''} (line {port.get('line')})".rstrip())
    return out


def _nvlink(result: dict[str, Any]) -> list[str]:
    devices: list[dict[str, Any]] = result.get("devices") or []
    out = [f"{result.get('source')}: {counted(len(devices), 'device')}"]
    for device in devices:
        states = Counter(str(link.get("state")) for link in device.get("links") or [])
        shown = ", ".join(f"{n} {state}" for state, n in states.items()) or device.get("message") or "no links"
        out.append(f"  {device.get('kind')} {device.get('index')} (line {device.get('line')}): {shown}")
    return out


def _topo(result: dict[str, Any]) -> list[str]:
    return [f"{counted(len(result.get('devices') or []), 'device')}: {' '.join(result.get('devices') or [])}, "
            f"lines {result.get('line')}-{result.get('last_line')}"]


def _prescreen(result: dict[str, Any]) -> list[str]:
    steps: list[dict[str, Any]] = result.get("steps") or []
    out = [f"host {result.get('host')} (line {result.get('host_line')}), job {result.get('job_id')}: "
           f"{counted(len(steps), 'step')}, {result.get('failed_steps')} failed as the script counts"]
    for step in steps:
        state = (f"exit code {step['exit_code']}" if step.get("exit_code") is not None else
                 f"unreadable at line {step.get('error_line')}: {step.get('error')}" if step.get("error") else "ran")
        out.append(f"  [{step.get('step')}] {step.get('title')} (line {step.get('line')}): {state}")
    return out


HEALTH_VIEWS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "prescreen": _prescreen,
    "nvidia-smi-q": _gpus,
    "nvidia-smi-xml": _gpus,
    "dcgmi-diag": _diag,
    "dcgmi-nvlink": _nvlink,
    "nvlink-status": _nvlink,
    "ibstat": _ports,
    "ibstatus": _ports,
    "nvidia-smi-topo": _topo,
    "fabric-manager": _fabric_manager,
    "kernel-log": _kernel,
}
