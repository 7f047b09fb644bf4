"""Compiling generated source: compiler and flags, an on-disk cache, readable build errors.

The compiler is `$CXX` (default `g++`), the flags `$TILEGRAPH_CXXFLAGS` (default `-O3 -march=native
-fopenmp -fno-trapping-math`) plus what a shared library needs. The generic `$CXXFLAGS` is not read: toolchain
activations set it for other builds (conda's has `-march=nocona -O2` and no `-fopenmp`), and taking it would build
single-threaded, unvectorised kernels without a word. `-fno-trapping-math` changes no
value (the code never reads floating-point exception flags); it lets GCC if-convert the selects in
the prelude's exp/erf/tanh, without which loops calling them stay scalar. Libraries are cached
under the user's cache directory (`$XDG_CACHE_HOME/tilegraph` or `~/.cache/tilegraph`, created private), keyed by a hash
of compiler, flags and source; a build writes to a temporary name and renames, so concurrent
builds of the same source are safe. A large program comes as several translation units too: they
compile to objects in parallel, one process per core, each cached by its own content (a changed
kernel rebuilds its unit only), and link into the library.
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tilegraph.ir import TilegraphError

DEFAULT_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-trapping-math")
REQUIRED_FLAGS = ("-std=c++17", "-shared", "-fPIC")


class BuildError(TilegraphError):
    """The compiler rejected generated source; the message holds its output and the source lines."""


def find_compiler(cxx: str | None = None) -> str:
    """The C++ compiler to use: `cxx`, else `$CXX`, else g++; a clear error when it is missing."""
    name = cxx or os.environ.get("CXX") or "g++"
    words = shlex.split(name)
    path = shutil.which(words[0]) if words else None
    if path is None:
        raise TilegraphError(f"no C++ compiler: {name!r} is not on PATH; install g++ or clang++, "
                             "or point CXX at one")
    return shlex.join([path, *words[1:]])


FLAGS_VARIABLE = "TILEGRAPH_CXXFLAGS"


def compile_flags(cxxflags: str | Sequence[str] | None = None) -> list[str]:
    """`cxxflags` (or `$TILEGRAPH_CXXFLAGS`, or the defaults), then the flags every build needs."""
    if cxxflags is None:
        cxxflags = os.environ.get(FLAGS_VARIABLE)
    if cxxflags is None:
        flags = list(DEFAULT_FLAGS)
    else:
        flags = shlex.split(cxxflags) if isinstance(cxxflags, str) else list(cxxflags)
    return flags + [f for f in REQUIRED_FLAGS if f not in flags]


def cache_dir() -> Path:
    """`tilegraph/` under the user's cache directory, readable by the user only."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root.mkdir(parents=True, exist_ok=True)
    base = root / "tilegraph"
    base.mkdir(exist_ok=True, mode=0o700)
    info = base.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid():
        raise TilegraphError(f"cache directory {base} is not a directory owned by this user; refusing to use it")
    if info.st_mode & 0o077:
        os.chmod(base, 0o700)
    path = base / "native"
    path.mkdir(exist_ok=True, mode=0o700)
    return path


def host_cpu() -> str:
    """What `-march=native` means here (model and feature flags), so a cache shared between
    machines never hands one a library built for another's instruction set."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine() + platform.processor()
    wanted = [line for line in text.splitlines() if line.split(":")[0].strip() in ("model name", "flags")]
    return platform.machine() + "\n" + "\n".join(sorted(set(wanted)))


def cache_key(compiler: str, flags: Sequence[str], source: str) -> str:
    """Hash of compiler, flags, source (and the host CPU when the flags target it)."""
    digest = hashlib.sha256()
    cpu = host_cpu() if any("native" in f for f in flags) else ""
    for part in (compiler, "\0".join(flags), cpu, source):
        digest.update(part.encode())
        digest.update(b"\1")
    return digest.hexdigest()[:32]


def build_library(source: str, compiler: str, flags: Sequence[str], suffix: str = ".cpp",
                  units: Sequence[str] = ()) -> tuple[Path, bool]:
    """The shared library for `source`: (path, whether it came from the cache). With `units` (the
    same code as several translation units), those compile in parallel, each cached by content."""
    key = cache_key(compiler, flags, source)
    directory = cache_dir()
    library = directory / f"tg_{key}.so"
    if library.exists():
        return library, True
    if units:
        link_units(units, compiler, flags, library)
    else:
        error = compile_to(library, source, compiler, flags, suffix)
        if error is not None:
            raise error
    return library, False


def link_units(units: Sequence[str], compiler: str, flags: Sequence[str], library: Path) -> None:
    """Compile each unit to an object (cached by content; missing ones in parallel, one process
    per core) and link them into `library`."""
    directory = cache_dir()
    object_flags = [f for f in flags if f != "-shared"] + ["-c"]
    objects = [directory / f"tg_{cache_key(compiler, object_flags, unit)}.o" for unit in units]
    missing = [(obj, unit) for unit, obj in zip(units, objects) if not obj.exists()]
    with ThreadPoolExecutor(max_workers=max(1, min(len(missing), os.cpu_count() or 1))) as pool:
        for error in pool.map(lambda job: compile_to(*job, compiler, object_flags), missing):
            if error is not None:
                raise error
    error = compile_to(library, "", compiler, [*flags, *map(str, objects)])
    if error is not None:
        raise error


def compile_to(target: Path, source: str, compiler: str, flags: Sequence[str], suffix: str = ".cpp"
               ) -> BuildError | None:
    """Run the compiler on `source` (none: `flags` name the inputs) into `target`, written under a
    temporary name and renamed, so concurrent builds are safe; the error, if any."""
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        inputs = []
        if source:
            src = Path(tmp) / f"{target.stem}{suffix}"
            src.write_text(source)
            inputs = [str(src)]
        out = Path(tmp) / f"out{target.suffix}"
        command = [*shlex.split(compiler), *flags, *inputs, "-o", str(out)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            name = Path(inputs[0]).name if inputs else ""
            return BuildError(format_build_error(result.stderr or result.stdout, source, name, command))
        os.replace(out, target)
    return None


_LOCATION = re.compile(r"(?P<file>[^\s:]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<msg>.*)")


def format_build_error(output: str, source: str, filename: str, command: Sequence[str], limit: int = 5) -> str:
    """The compiler's errors, each followed by the generated source line it points at."""
    lines = source.splitlines()
    parts = [f"building generated code failed: {shlex.join(command)}"]
    shown = 0
    for raw in output.splitlines():
        match = _LOCATION.match(raw)
        if not match or shown >= limit:
            continue
        shown += 1
        where = int(match["line"])
        parts.append(f"generated source line {where}: error: {match['msg']}")
        if 1 <= where <= len(lines):
            parts.append(f"  {where:5d} | {lines[where - 1]}")
    parts.append("compiler output:")
    parts.extend("  " + line for line in output.splitlines()[:40])
    return "\n".join(parts)
