"""Storage faults of a PBT population: a full disk, a quota, a read-only or failing file system.

Such an error is not a member's fault: retrying the member would fail the same way and burn its
``pbt.max_failures``. The local scheduler therefore stops the whole population at the first one
(see :class:`PopulationStopped`), naming the path and the error, and ``riskppo pbt --resume``
continues from the last completed round once the disk is fixed.
"""

from __future__ import annotations

import dataclasses
import errno
import os

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO})
"""No space, over quota, read-only file system, file too large (a size limit), device I/O error."""


@dataclasses.dataclass(frozen=True)
class StorageFault:
    """An OS error of :data:`STORAGE_ERRNOS` on ``path`` (None: the failing call named none)."""

    errno: int
    strerror: str
    path: str | None

    def describe(self, where: str | None = None) -> str:
        """``PATH: No space left on device (ENOSPC)``; ``where`` stands in for a missing path."""
        name = errno.errorcode.get(self.errno, str(self.errno))
        return f"{self.path or where or 'unknown path'}: {self.strerror} ({name})"


def storage_fault(exc: BaseException) -> StorageFault | None:
    """The storage fault behind ``exc`` (itself, or an OS error it was raised from), or None.

    A wrapper such as :class:`riskppo.persist.checkpoint.CheckpointError` keeps the OS error as its
    ``__cause__``; that error's own file name wins over the wrapper's."""
    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if isinstance(node, OSError) and node.errno in STORAGE_ERRNOS:
            code = int(node.errno)
            path = node.filename if node.filename is None else str(node.filename)
            return StorageFault(code, node.strerror or os.strerror(code), path)
        node = node.__cause__ or node.__context__
    return None


class PopulationStopped(RuntimeError):
    """The population stopped on a storage fault; the message is one line (path, error, what
    was kept, how to continue)."""

    def __init__(self, message: str, fault: StorageFault) -> None:
        super().__init__(message)
        self.fault = fault
