"""Where the plugin's built files are, and building them on first use.

``bundled`` in an inventory (the ``sim-*`` ones), ``ncclbot-sweep plugin build|path`` and the
simulator's NCCL stand-in all ask this module; nothing else decides where the plugin is. The
C sources ship inside the package (``ncclbot_sweep.resources.plugin``, the repository's
``plugin/``), so an installed package needs only a C compiler: the first use compiles them
into ``<cache>/plugin-<version>-<digest>/``, ``<cache>`` being ``$NCCLBOT_PLUGIN_CACHE``, else
the user cache of :mod:`ncclbot_sweep.usercache`. The digest covers the sources and the
compile commands, so an upgrade or another release never loads a stale build. A source
checkout (an editable install) builds into its own ``plugin/build``, where ``make -C plugin``
puts the same files; there, as with make, an edited source is rebuilt by asking for it
(``make -C plugin`` or ``ncclbot-sweep plugin build``).

A build holds a lock file in the build folder, so concurrent first uses (the rank processes
of a live step) compile once; it compiles into a temporary folder inside it and renames each
file into place, so no process loads a half-written library. pip never compiles anything.
:func:`compile_commands` is ``plugin/Makefile``'s ``all``, command for command (a test
compares the two with ``make -n``).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ncclbot_sweep import __version__
from ncclbot_sweep.errors import PluginBuildError
from ncclbot_sweep.resources import resource_dir
from ncclbot_sweep.usercache import cache_root

__all__ = ["BUNDLED", "CACHE_VARIABLE", "COORDINATOR", "FILES", "LIBRARY", "SETTINGS", "SIM_HOST", "SOURCES",
           "build", "build_dir", "built_file", "compile_commands", "source_dir"]

log = logging.getLogger(__name__)

#: The inventory value meaning "the plugin built from the sources this package ships".
BUNDLED = "bundled"
LIBRARY = "libnccl-ncclbot.so"
COORDINATOR = "ncclbot-coordinator"
SETTINGS = "ncclbot-settings"
SIM_HOST = "libncclbot-simhost.so"
#: Every built file by the name ``plugin path --json`` gives it.
FILES = {"plugin": LIBRARY, "coordinator": COORDINATOR, "settings": SETTINGS, "simhost": SIM_HOST}
#: Moves the cache of an installed package, e.g. onto a file system the compute nodes see.
CACHE_VARIABLE = "NCCLBOT_PLUGIN_CACHE"
#: The files the commands read, relative to the source folder: what the wheel ships and the digest covers.
SOURCES = ("src/*.c", "src/*.h", "host/*.c")

# plugin/Makefile's CFLAGS_BASE and OPT, LDLIBS, the shared-library flags and the sources with a main().
_CFLAGS = ("-std=gnu11", "-fPIC", "-pthread", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
           "-fno-math-errno", "-ffp-contract=off", "-O2")
_LDLIBS = ("-lm", "-ldl", "-pthread")
_SHARED = ("-shared", "-Wl,-z,defs")
_MAINS = ("src/coord_main.c", "src/coordinator.c", "src/settings_main.c")
_LOCK = ".build.lock"
_LOG = "build.log"
_INSTALL_CC = "install a C compiler (Debian/Ubuntu: apt-get install gcc; Fedora/RHEL: dnf install gcc) or set CC to one"


def source_dir() -> Path:
    """The plugin's C sources: a checkout's ``plugin/``, or the installed package's copy."""
    return resource_dir("plugin").resolve()


def _is_checkout(sources: Path) -> bool:
    """Whether the sources are a repository's ``plugin/`` (mapped in by an editable install), not package data."""
    return not sources.is_relative_to(Path(__file__).resolve().parent)


def build_dir() -> Path:
    """Where the built files are, or will be: a checkout's ``plugin/build``, else the cache folder of these sources."""
    sources = source_dir()
    if _is_checkout(sources):
        return sources / "build"
    return cache_root(CACHE_VARIABLE) / f"plugin-{__version__}-{_digest(sources)}"


def compile_commands(out: Path, *, cc: list[str], sources: Path) -> list[tuple[str, list[str]]]:
    """(file name, compiler command) for every file of :data:`FILES`, run in ``sources``, writing into ``out``."""
    library = [name for name in _matching(sources, "src/*.c") if name not in _MAINS]

    def command(name: str, flags: tuple[str, ...], inputs: list[str],
                libs: tuple[str, ...] = ()) -> tuple[str, list[str]]:
        return name, [*cc, *_CFLAGS, *flags, "-o", str(out / name), *inputs, *libs, *_LDLIBS]

    return [
        command(LIBRARY, (*_SHARED, f"-Wl,-soname,{LIBRARY}"), library),
        command(COORDINATOR, (), ["src/coord_main.c", "src/coordinator.c"]),
        command(SETTINGS, (), ["src/settings_main.c", "src/config.c", "src/log.c"]),
        command(SIM_HOST, _SHARED, ["host/simhost.c"], ()),
    ]


def _matching(sources: Path, pattern: str) -> list[str]:
    return sorted(path.relative_to(sources).as_posix() for path in sources.glob(pattern))


@functools.cache
def _digest(sources: Path) -> str:
    """A hash of the compile commands and every source file (cached: installed sources never change)."""
    digest = hashlib.sha256()
    for _name, command in compile_commands(Path("out"), cc=["cc"], sources=sources):
        digest.update(shlex.join(command).encode() + b"\n")
    for name in sorted({n for pattern in SOURCES for n in _matching(sources, pattern)}):
        digest.update(name.encode() + b"\0" + hashlib.sha256((sources / name).read_bytes()).digest())
    return digest.hexdigest()[:16]


def build(*, force: bool = False) -> Path:
    """The build folder with every file of :data:`FILES` in it, compiled first if one is missing (or ``force``).

    Called when a plan resolves ``bundled``, by the simulator's host loader and by ``plugin
    build`` (``force``). Processes may race: one compiles while the others wait for its lock,
    then find the files. Raises PluginBuildError (no compiler, a compile error, a folder that
    cannot be written).
    """
    folder = build_dir()
    if not force and _complete(folder):
        return folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with _locked(folder / _LOCK):
            if force or not _complete(folder):
                _compile(source_dir(), folder)
    except OSError as exc:
        where = "" if _is_checkout(source_dir()) else f", or set {CACHE_VARIABLE} to a folder you can write to"
        raise PluginBuildError(f"cannot build the plugin in {folder}: {exc.strerror or exc}{where}") from exc
    return folder


def built_file(name: str) -> Path:
    """The absolute path of one built file (a name of :data:`FILES`), building on first use."""
    return build() / name


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in FILES.values())


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (released when the file closes, also if the process dies)."""
    with open(path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _compile(sources: Path, folder: Path) -> None:
    """Compile every file into a temporary folder, then rename each into ``folder``; called under the lock."""
    cc = _compiler()
    for leftover in folder.glob(".build-*"):  # a build killed half-way; nobody else holds the lock
        shutil.rmtree(leftover, ignore_errors=True)
    log.info("building the plugin from %s into %s", sources, folder)
    transcript = []
    with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
        commands = compile_commands(Path(tmp), cc=cc, sources=sources)
        for _name, command in commands:
            done = subprocess.run(command, cwd=sources, capture_output=True, text=True, check=False)
            transcript.append(f"$ {shlex.join(command)}\n{done.stdout}{done.stderr}")
            if done.returncode != 0:
                (folder / _LOG).write_text("".join(transcript), encoding="utf-8")
                raise PluginBuildError(f"the plugin did not compile: {_first_error(done)} "
                                       f"(the compiler's output is in {folder / _LOG})")
        for name, _command in commands:
            os.replace(Path(tmp) / name, folder / name)
    (folder / _LOG).write_text("".join(transcript), encoding="utf-8")


def _compiler() -> list[str]:
    """``$CC`` (as make reads it) or ``cc``, as words; PluginBuildError when it is not there."""
    words = shlex.split(os.environ.get("CC", "")) or ["cc"]
    if shutil.which(words[0]) is None:
        named = f"CC={os.environ['CC']!r} not found" if os.environ.get("CC", "").strip() else "'cc' not on PATH"
        raise PluginBuildError(f"no C compiler to build the plugin ({named}); {_INSTALL_CC}")
    return words


def _first_error(done: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in f"{done.stdout}\n{done.stderr}".splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [f"exit code {done.returncode}"])[0]
