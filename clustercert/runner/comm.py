"""A process group over TCP sockets: rendezvous from Slurm's variables, then ring and pairwise collectives.

One process per Slurm task. Rank 0 listens on the rendezvous port; every rank opens its own listening
socket, tells rank 0 where it is, receives the table of all addresses and connects to every higher rank
(a full mesh: the jobs are a few tasks). Collectives follow NCCL's algorithms in their simplest form:
ring reduce-scatter and all-gather (all-reduce is both), pairwise exchange for all-to-all, a ring shift
for send/recv. Sends run in a helper thread while the caller receives, so neither side can block the other.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ProcessGroup", "Rendezvous", "rendezvous_from_env"]

F32 = npt.NDArray[np.float32]
_HEADER = struct.Struct("!Q")


@dataclass(frozen=True)
class Rendezvous:
    """Who this process is and where rank 0 listens."""

    rank: int
    world: int
    master_addr: str
    master_port: int
    node: str


def rendezvous_from_env(env: Mapping[str, str], *, port_base: int = 21000) -> Rendezvous:
    """Rank, world size and rendezvous address from Slurm's task variables (MASTER_ADDR/PORT override them).

    The port is derived from the job and step ids so that concurrent steps and a requeued job's new run do
    not collide; the address is the batch host's (SLURM_LAUNCH_NODE_IPADDR), where rank 0 usually runs.
    """
    try:
        rank = int(env["SLURM_PROCID"])
        world = int(env["SLURM_NTASKS"])
    except KeyError as missing:
        raise RuntimeError(f"expected Slurm task variables, got no {missing.args[0]}: launch with srun") from None
    job = int(env.get("SLURM_JOB_ID", "0"))
    step = int(env.get("SLURM_STEP_ID", "0") or 0)
    restart = int(env.get("SLURM_RESTART_COUNT", "0") or 0)
    port = int(env.get("MASTER_PORT", port_base + (job * 97 + step * 13 + restart * 7) % 20000))
    addr = env.get("MASTER_ADDR", env.get("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"))
    node = env.get("SLURMD_NODENAME", socket.gethostname())
    return Rendezvous(rank, world, addr, port, node)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("peer closed the connection")
        got += k
    return bytes(buf)


def _send_msg(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _recv_msg(sock: socket.socket) -> bytes:
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    return _recv_exact(sock, n)


class ProcessGroup:
    """A connected full mesh of `world` processes; collectives on float32 NumPy arrays."""

    def __init__(self, rdv: Rendezvous, *, timeout_s: float = 120.0) -> None:
        self.rank = rdv.rank
        self.world = rdv.world
        self.node = rdv.node
        self.nodes: list[str] = [rdv.node]
        self.peers: dict[int, socket.socket] = {}
        if self.world == 1:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1" if rdv.master_addr.startswith("127.") else "", 0))
        listener.listen(self.world)
        my_port = listener.getsockname()[1]
        host = rdv.master_addr if rdv.master_addr.startswith("127.") else socket.gethostbyname(socket.gethostname())
        table = self._exchange_table(rdv, f"{host}:{my_port}:{rdv.node}", timeout_s)
        self.nodes = [entry.split(":", 2)[2] for entry in table]
        listener.settimeout(timeout_s)
        for peer in range(self.rank + 1, self.world):
            addr, port, _ = table[peer].split(":", 2)
            self.peers[peer] = self._connect(addr, int(port), timeout_s)
            _send_msg(self.peers[peer], struct.pack("!I", self.rank))
        for _ in range(self.rank):
            conn, _addr = listener.accept()
            conn.settimeout(timeout_s)
            (peer,) = struct.unpack("!I", _recv_msg(conn))
            self.peers[peer] = conn
        listener.close()
        for s in self.peers.values():
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @staticmethod
    def _connect(addr: str, port: int, timeout_s: float) -> socket.socket:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                s = socket.create_connection((addr, port), timeout=timeout_s)
                s.settimeout(timeout_s)
                return s
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _exchange_table(self, rdv: Rendezvous, mine: str, timeout_s: float) -> list[str]:
        if self.rank == 0:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((rdv.master_addr, rdv.master_port))
            server.listen(self.world)
            server.settimeout(timeout_s)
            table = [""] * self.world
            table[0] = mine
            conns = []
            for _ in range(self.world - 1):
                conn, _addr = server.accept()
                conn.settimeout(timeout_s)
                rank_s, entry = _recv_msg(conn).decode().split("|", 1)
                table[int(rank_s)] = entry
                conns.append(conn)
            blob = "\n".join(table).encode()
            for conn in conns:
                _send_msg(conn, blob)
                conn.close()
            server.close()
            return table
        conn = self._connect(rdv.master_addr, rdv.master_port, timeout_s)
        _send_msg(conn, f"{self.rank}|{mine}".encode())
        table = _recv_msg(conn).decode().split("\n")
        conn.close()
        return table

    def close(self) -> None:
        for s in self.peers.values():
            s.close()
        self.peers.clear()

    # point to point -------------------------------------------------------------------------------
    def sendrecv_bytes(self, send_to: int, payload: bytes, recv_from: int) -> bytes:
        """Send `payload` to one rank while receiving from another (either may be this rank)."""
        if send_to == self.rank and recv_from == self.rank:
            return payload
        error: list[BaseException] = []

        def push() -> None:
            try:
                _send_msg(self.peers[send_to], payload)
            except BaseException as exc:
                error.append(exc)

        sender = threading.Thread(target=push, daemon=True)
        if send_to != self.rank:
            sender.start()
        got = payload if recv_from == self.rank else _recv_msg(self.peers[recv_from])
        if send_to != self.rank:
            sender.join()
        if error:
            raise error[0]
        return got

    def sendrecv(self, send_to: int, data: F32, recv_from: int) -> F32:
        raw = self.sendrecv_bytes(send_to, np.ascontiguousarray(data, dtype=np.float32).tobytes(), recv_from)
        return np.frombuffer(raw, dtype=np.float32).copy()

    # collectives ----------------------------------------------------------------------------------
    def _chunks(self, n: int) -> list[slice]:
        bounds = np.linspace(0, n, self.world + 1).astype(int)
        return [slice(int(bounds[i]), int(bounds[i + 1])) for i in range(self.world)]

    def reduce_scatter(self, data: F32) -> F32:
        """Ring reduce-scatter of a flat array: returns this rank's reduced chunk (rank r owns chunk r)."""
        buf = np.array(data, dtype=np.float32).ravel()
        if self.world == 1:
            return buf
        parts = self._chunks(buf.size)
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        for k in range(self.world - 1):
            send_idx = (self.rank - k - 1) % self.world
            recv_idx = (self.rank - k - 2) % self.world
            got = self.sendrecv(nxt, buf[parts[send_idx]], prv)
            buf[parts[recv_idx]] += got
        return buf[parts[self.rank]].copy()

    def all_gather(self, chunk: F32, total: int | None = None) -> F32:
        """Ring all-gather: rank r contributes chunk r; every rank gets the concatenation."""
        piece = np.ascontiguousarray(chunk, dtype=np.float32).ravel()
        if self.world == 1:
            return piece.copy()
        n = total if total is not None else piece.size * self.world
        parts = self._chunks(n)
        out = np.empty(n, dtype=np.float32)
        out[parts[self.rank]] = piece
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        for k in range(self.world - 1):
            send_idx = (self.rank - k) % self.world
            recv_idx = (self.rank - k - 1) % self.world
            out[parts[recv_idx]] = self.sendrecv(nxt, out[parts[send_idx]], prv)
        return out

    def all_reduce(self, data: F32) -> F32:
        """Ring all-reduce (sum): reduce-scatter then all-gather, as NCCL's ring algorithm."""
        flat = np.ascontiguousarray(data, dtype=np.float32).ravel()
        if self.world == 1:
            return flat.copy().reshape(np.shape(data))
        mine = self.reduce_scatter(flat)
        return self.all_gather(mine, flat.size).reshape(np.shape(data))

    def alltoall(self, data: F32) -> F32:
        """Pairwise all-to-all: chunk j of this rank goes to rank j; returns the chunks received, in rank order."""
        flat = np.ascontiguousarray(data, dtype=np.float32).ravel()
        parts = self._chunks(flat.size)
        out = np.empty_like(flat)
        sizes = [p.stop - p.start for p in parts]
        if len(set(sizes)) != 1:
            raise ValueError(f"alltoall: expected a size divisible by {self.world}, got {flat.size}")
        out[parts[self.rank]] = flat[parts[self.rank]]
        for k in range(1, self.world):
            to, frm = (self.rank + k) % self.world, (self.rank - k) % self.world
            out[parts[frm]] = self.sendrecv(to, flat[parts[to]], frm)
        return out

    def barrier(self) -> None:
        self.all_reduce(np.zeros(1, dtype=np.float32))

    def gather_floats(self, values: list[float]) -> list[list[float]]:
        """Every rank's list of floats (same length on every rank), for scores and timings."""
        arr = np.zeros(len(values) * self.world, dtype=np.float32)
        arr[self.rank * len(values):(self.rank + 1) * len(values)] = values
        total = self.all_reduce(arr)
        return [total[r * len(values):(r + 1) * len(values)].astype(float).tolist() for r in range(self.world)]


def env_rendezvous() -> Rendezvous:
    """The rendezvous of this process, from os.environ."""
    return rendezvous_from_env(os.environ)
