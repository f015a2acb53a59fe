"""Where a source checkout keeps what ``make -C plugin`` builds, for inventories that say ``bundled``.

The simulated inventories name the plugin, its coordinator and the simulator's NCCL
stand-in this way, so a fresh checkout runs live campaigns after ``make`` with no path of
the machine in any file. A missing build is an :class:`~ncclbot_sweep.errors.InventoryError`
that names the command that builds it.
"""

from __future__ import annotations

from pathlib import Path

from ncclbot_sweep.errors import InventoryError

__all__ = ["BUNDLED", "COORDINATOR", "LIBRARY", "SIM_HOST", "build_dir", "bundled_file"]

#: The inventory value meaning "the build of this source checkout".
BUNDLED = "bundled"
LIBRARY = "libnccl-ncclbot.so"
COORDINATOR = "ncclbot-coordinator"
SIM_HOST = "libncclbot-simhost.so"


def build_dir() -> Path:
    """``plugin/build`` of the checkout this package was installed from (editable install)."""
    return Path(__file__).resolve().parents[1] / "plugin" / "build"


def bundled_file(name: str, *, what: str = "plugin.path") -> Path:
    """The absolute path of one built file; raises InventoryError naming ``make -C plugin``.

    Called when a plan resolves ``bundled`` (so ``plan`` fails before anything runs) and by
    the simulator when it loads its NCCL stand-in.
    """
    path = build_dir() / name
    if not path.is_file():
        checkout = build_dir().parents[1]
        raise InventoryError(
            f"{what} is {BUNDLED!r} but {path} is not built",
            hint=f"run 'make -C {checkout / 'plugin'}' (or 'make demo' / 'make test'), "
                 "or set an absolute path in the inventory")
    return path
