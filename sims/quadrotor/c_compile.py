"""Compile a C source into a shared library once per machine, cached by content.

The library lands in ``$ROBO_CACHE/c`` (default ``~/.cache/robo/c``) under a name keyed by the
hash of the source, the flags, the compiler and this CPU's instruction-set flags (``-march=native``
code is only valid on the CPU it was built for), so a changed source or another machine rebuilds and
an unchanged one loads in milliseconds. Builds write to a temporary file and rename it into place,
so processes that compile the same library at once do not see each other's half-written files.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

OPT_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-ffp-contract=off")
WARN_FLAGS = ("-std=c99", "-Wall", "-Wextra")  # no -Werror: a newer compiler's new warning must not stop a build


class CompilerNotFound(RuntimeError):
    """No C compiler on this machine."""


def find_cc() -> str:
    """The C compiler: ``$CC`` or ``gcc`` (then ``cc``) on the PATH; raises ``CompilerNotFound``."""
    names = [os.environ["CC"]] if os.environ.get("CC") else ["gcc", "cc"]
    for name in names:
        cc = shutil.which(name)
        if cc:
            return cc
    raise CompilerNotFound(f"no C compiler found ({' or '.join(map(repr, names))} is not on the PATH): "
                           "install gcc or set CC")


def cache_dir() -> Path:
    """Folder of compiled libraries: ``$ROBO_CACHE/c``, default ``~/.cache/robo/c``."""
    return Path(os.environ.get("ROBO_CACHE") or Path.home() / ".cache" / "robo") / "c"


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def shared_library(source: Path, defines: dict[str, str], flags: tuple[str, ...] = OPT_FLAGS) -> Path:
    """Path of ``source`` compiled with ``-D`` ``defines`` and ``flags`` into a shared library (built if needed)."""
    cc = find_cc()
    args = [*WARN_FLAGS, *flags, "-fPIC", "-shared", *(f"-D{k}={v}" for k, v in sorted(defines.items()))]
    key = hashlib.sha256("\0".join([source.read_text(), cc, *args, _cpu_flags()]).encode()).hexdigest()[:16]
    lib = cache_dir() / f"{source.stem}-{key}.so"
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=lib.parent)
    os.close(fd)
    cmd = [cc, *args, str(source), "-o", tmp, "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError(f"compiling {source.name} failed ({' '.join(cmd)}):\n{r.stderr}")
    os.replace(tmp, lib)
    return lib
