"""A fault for scripts the tests run in a process of their own: the second ``os.fork`` fails as when
a process limit is reached (EAGAIN)."""

from __future__ import annotations

import errno
import os


def fail_second_fork() -> None:
    real_fork, forks = os.fork, []

    def failing_fork() -> int:
        forks.append(1)
        if len(forks) == 2:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return real_fork()

    os.fork = failing_fork
