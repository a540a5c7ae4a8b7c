"""A real local Ray cluster for tests: a head node and worker nodes, each a
`ray start --block` process this module started and stops, on a temporary
directory.

Worker nodes declare resource labels (for example `{"NPU": 1}`): labels the
scheduler matches, not devices. Each worker also carries a label of its own
name, so a test can tell which node ran an evaluation and kill that node's
raylet.

Ray advertises a machine's own network address, not 127.0.0.1, unless that
address is the only one: scripts/test runs the `ray` tests inside a network
namespace that holds only the loopback interface (`unshare -n`), so every
port the cluster opens is on 127.0.0.1 and nothing can leave the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RAY = Path(sys.executable).parent / "ray"
START_TIMEOUT_S = 180.0  # `ray start` on a loaded two-core machine
READY = "This command will now block forever"  # what `ray start --block` prints once its node runs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes() -> list[tuple[int, list[str]]]:
    """(pid, the fields of /proc/PID/stat after the name) of every process."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            out.append((int(entry), stat[stat.rfind(")") + 2 :].split()))
    return out


def _children(pid: int) -> list[int]:
    return [p for p, fields in _processes() if int(fields[1]) == pid]


def _session_members(sid: int) -> list[int]:
    return [p for p, fields in _processes() if int(fields[3]) == sid and fields[0] != "Z"]


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    resources: dict[str, float]
    killed: bool = False  # its raylet was killed on purpose

    def raylet(self) -> int | None:
        stack = [self.proc.pid]
        while stack:
            pid = stack.pop()
            for kid in _children(pid):
                if _name(kid) == "raylet":
                    return kid
                stack.append(kid)
        return None

    def kill_raylet(self) -> None:
        pid = self.raylet()
        if pid is None:
            raise RuntimeError(f"node {self.name} has no raylet")
        os.kill(pid, signal.SIGKILL)
        self.killed = True

    def stop(self) -> None:
        """`ray start --block` stops its node on SIGTERM; whatever of the
        node's session outlives that (workers, dashboard) is killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 30
        while _session_members(self.proc.pid) and time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.1)  # SIGKILLed processes take a moment to go
        if self.proc.poll() is None:
            self.proc.wait(timeout=30)


@dataclass
class Cluster:
    temp: Path
    port: int
    # Token authentication, as a team cluster should run: every node, and
    # every process that connects, needs the cluster's token. Ray reads it
    # when it is imported, so the test process sets it before that.
    token: str = field(default_factory=lambda: os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32))
    head: Node | None = None
    workers: dict[str, Node] = field(default_factory=dict)
    starting: list[Node] = field(default_factory=list)  # every node started, for stop()

    @property
    def env(self) -> dict[str, str]:
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "RAY_USAGE_STATS_ENABLED": "0"}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, name: str, args: list[str], resources: dict[str, float], python: str | None = None) -> Node:
        """Start a node and wait until `ray start` says it runs. One at a time:
        nodes registering at once can time a `ray start` out ("Failed to get
        node info: Deadline Exceeded") while its raylet process exists, and a
        node whose start failed is started once more."""
        for _ in range(2):
            log_path = self.temp / f"{name}.log"
            with open(log_path, "wb") as log:
                # A node's workers run on the interpreter that ran `ray start`.
                proc = subprocess.Popen(
                    [
                        *([python] if python else []),
                        str(RAY),
                        "start",
                        "--block",
                        "--disable-usage-stats",
                        "--node-ip-address",
                        "127.0.0.1",
                        "--resources",
                        json.dumps(resources),
                        *args,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, **self.env},
                )
            node = Node(name, proc, resources)
            self.starting.append(node)
            deadline = time.monotonic() + START_TIMEOUT_S
            while READY not in log_path.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)  # polling a process we started; there is no event to wait on
            else:
                return node
            output = log_path.read_text(errors="replace")[-2000:]
            node.stop()
            self.starting.remove(node)
        raise RuntimeError(f"ray node {name} did not start, twice: {output}")

    def start_head(self, num_cpus: int = 1) -> None:
        self.head = self._start(
            "head",
            [
                "--head",
                "--port",
                str(self.port),
                "--temp-dir",
                str(self.temp / "ray"),
                "--num-cpus",
                str(num_cpus),
                "--include-dashboard",
                "true",
                "--dashboard-host",
                "127.0.0.1",
                "--dashboard-port",
                str(_free_port()),
            ],
            {"sage_test_head": 1},
        )

    def add_worker(self, name: str, labels: dict[str, float], num_cpus: int = 1, python: str | None = None) -> Node:
        """A worker node; `python` runs its `ray start` (and so its workers)
        instead of this virtualenv's interpreter."""
        node = self._start(name, ["--address", self.address, "--num-cpus", str(num_cpus)], {**labels, f"sage_test_{name}": 1}, python)
        self.workers[name] = node
        return node

    def remove_worker(self, name: str) -> None:
        """Stop a worker node and leave it out of what wait_for_nodes expects."""
        node = self.workers.pop(name)
        node.stop()
        self.starting.remove(node)

    def wait_for_nodes(self) -> None:
        """Until Ray sees exactly the nodes started and not killed: each
        started one alive, each killed one dead (Ray notices a lost node
        seconds later, so counting alive nodes right after a kill lies). A
        node whose `ray start` exited unasked fails the wait at once."""
        import ray

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            gone = [n for n in self.starting if n.proc.poll() is not None and not n.killed]
            if gone:
                raise RuntimeError(
                    "; ".join(
                        f"ray node {n.name} exited ({n.proc.returncode}): "
                        f"{(self.temp / f'{n.name}.log').read_text(errors='replace')[-1500:]}"
                        for n in gone
                    )
                )
            alive = {
                k.removeprefix("sage_test_")
                for n in ray.nodes()
                if n["Alive"]
                for k in n.get("Resources", {})
                if k.startswith("sage_test_")
            }
            expected = {n.name for n in self.starting if not n.killed}
            if alive == expected:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray sees {sorted(alive)}, running are {sorted(expected)}")
            time.sleep(0.2)  # polling the cluster's state; there is no event to wait on

    def node_of(self, node_id: str) -> Node | None:
        import ray

        for info in ray.nodes():
            if info["NodeID"] == node_id:
                for name, node in self.workers.items():
                    if f"sage_test_{name}" in info["Resources"]:
                        return node
        return None

    def stop(self) -> None:
        for node in reversed(self.starting):
            node.stop()
        shutil.rmtree(self.temp, ignore_errors=True)


def start_cluster() -> Cluster:
    temp = Path(tempfile.mkdtemp(prefix="sage-ray-"))
    cluster = Cluster(temp, _free_port())
    try:
        cluster.start_head()
    except BaseException:
        cluster.stop()
        raise
    return cluster
