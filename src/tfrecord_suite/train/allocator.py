"""Which ``malloc`` this process runs with: tf.data on large records wants tcmalloc.

tf.data allocates and frees every record's bytes, and on large records (images, 100 KB and more)
glibc's ``malloc`` hands memory back to the kernel between batches and faults it in again, so
the reader spends much of its CPU time in the kernel's page-fault handler. tcmalloc keeps freed
memory for reuse and the faults disappear (``python -m benchmarks`` reports the read side under
both allocators; small records gain less than large ones). The allocator
must be chosen when the process starts (``LD_PRELOAD``), so the suite's images set it and
``make bench`` uses it when it can fetch it; a trainer under glibc logs how to switch.
"""

from __future__ import annotations

import glob
import os
import platform
import sys

#: Where the suite's images link tcmalloc, whatever the architecture's library folder.
IMAGE_TCMALLOC = "/usr/local/lib/libtcmalloc_minimal.so.4"
_ALLOCATORS = ("tcmalloc", "jemalloc", "mimalloc")


def loaded_allocator(maps_path: str = "/proc/self/maps") -> str:
    """The allocator loaded into this process.

    Returns:
        ``"tcmalloc"``, ``"jemalloc"`` or ``"mimalloc"`` if one is loaded, else ``"glibc"``;
        ``"unknown"`` where neither the memory map nor the C library can be read.

    """
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as maps:
            libraries = {line.rsplit("/", 1)[-1] for line in maps if ".so" in line}
    except OSError:
        return "unknown"
    for name in _ALLOCATORS:
        if any(lib.startswith(f"lib{name}") for lib in libraries):
            return name
    return "glibc" if platform.libc_ver()[0] == "glibc" else "unknown"


def find_tcmalloc(extra_dirs: tuple[str, ...] = ()) -> str | None:
    """A ``libtcmalloc_minimal.so.4`` on this machine, or None.

    Looked for in ``extra_dirs``, the virtual environment's ``lib`` (``make`` puts one there), the
    images' link, then the system's library folders.
    """
    folders = (*extra_dirs, os.path.join(sys.prefix, "lib"))
    candidates = [os.path.join(d, "libtcmalloc_minimal.so.4") for d in folders]
    candidates.append(IMAGE_TCMALLOC)
    candidates += sorted(glob.glob("/usr/lib/*/libtcmalloc_minimal.so.4"))
    candidates += sorted(glob.glob("/usr/lib*/libtcmalloc_minimal.so.4"))
    return next((path for path in candidates if os.path.exists(path)), None)


def allocator_advice(allocator: str | None = None) -> str | None:
    """A line for the log when tf.data would run faster under another allocator, else None.

    Args:
        allocator: What :func:`loaded_allocator` returned, if the caller has it already.

    """
    if (allocator or loaded_allocator()) != "glibc":
        return None
    found = find_tcmalloc()
    how = f"LD_PRELOAD={found}" if found else "install libtcmalloc-minimal4, then LD_PRELOAD it"
    return (
        "tf.data runs with glibc malloc here; large records read faster under "
        f"tcmalloc ({how}; the suite's images set it)"
    )
