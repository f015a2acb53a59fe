"""Session fixtures: a real loopback Slurm cluster (munge, slurmctld, slurmd n[1-4]) and sshd.

Both are started once per test session in a temporary folder and stopped at its end; they
bind only to 127.0.0.1. When a daemon cannot be installed or started the dependent tests
skip with the reason (``tests/infra/install-test-packages.sh`` installs them; ``make test``
runs it). Set ``NCCLBOT_REQUIRE_INFRA=1`` to turn such a skip into a failure (CI).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loopback import InfraUnavailable, SlurmCluster, Sshd  # noqa: E402


def _unavailable(reason: str) -> None:
    if os.environ.get("NCCLBOT_REQUIRE_INFRA") == "1":
        pytest.fail(f"required test infrastructure is unavailable: {reason}")
    pytest.skip(f"test infrastructure unavailable: {reason}")


@pytest.fixture(scope="session")
def infra_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("loopback")


@pytest.fixture(scope="session")
def slurm_cluster(infra_root: Path):
    """The running 4-node cluster; ``SLURM_CONF`` points at it for the whole session."""
    cluster = SlurmCluster(infra_root / "slurm")
    patch = pytest.MonkeyPatch()
    try:
        try:
            cluster.start()
        except (InfraUnavailable, OSError) as exc:
            cluster.stop()
            _unavailable(str(exc))
        patch.setenv("SLURM_CONF", str(cluster.conf))
        yield cluster
    finally:
        patch.undo()
        cluster.stop()


@pytest.fixture(scope="session")
def sshd(infra_root: Path):
    """sshd on a free loopback port; sessions get ``SLURM_CONF`` of the loopback cluster."""
    server = Sshd(infra_root / "ssh", env=SlurmCluster(infra_root / "slurm").env())
    try:
        try:
            server.start()
        except (InfraUnavailable, OSError) as exc:
            _unavailable(str(exc))
        yield server
    finally:
        server.stop()


@pytest.fixture
def ssh_settings(sshd: Sshd):
    """Settings for an SshTransport to the loopback sshd (fast retries for tests)."""
    from ncclbot_sweep.sweep.transport import SshSettings

    return SshSettings(host="127.0.0.1", port=sshd.port, user=sshd.user, key_path=str(sshd.user_key),
                       known_hosts_path=str(sshd.known_hosts), connect_timeout_s=10,
                       attempts=4, backoff_s=0.3)


@pytest.fixture(autouse=True)
def _nodes_back(request: pytest.FixtureRequest):
    """After a test that used the cluster, make sure every node is up again."""
    yield
    if "slurm_cluster" in request.fixturenames:
        cluster = request.getfixturevalue("slurm_cluster")
        states = cluster.node_states()
        for node, state in states.items():
            if state.rstrip("*~#") not in ("idle", "mixed", "allocated", "completing"):
                cluster.resume_node(node)
        if any(not s.startswith("idle") for s in states.values()):
            cluster.wait_nodes_idle(30)
