"""One timing phase at a time per host: within this process a lock, across
the host's SAGE processes a file lock (`Config.timing_lock`)."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)
POLL_S = 0.05  # how often a wait for the turn (or a worker's event, host/workers.py) looks again


class TimingTurn:
    """One timing phase at a time: within this process a lock, across the
    host's SAGE processes a file lock. Waits give up when `cancel` is set."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.holder: object | None = None
        self._fd: int | None = None

    def acquire(self, worker: object, stop: Callable[[], bool]) -> bool:
        while not self.lock.acquire(timeout=POLL_S):
            if stop():
                return False
        fd = self._open()
        while fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if stop():
                    os.close(fd)
                    self.lock.release()
                    return False
                time.sleep(0.02)
        self._fd, self.holder = fd, worker
        return True

    def release(self, worker: object) -> None:
        if self.holder is not worker:
            return
        self.holder = None
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
        self.lock.release()

    def _open(self) -> int | None:
        if not self.path:
            return None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            log.warning("cannot open the timing lock %s (%s); timing is serialised in this process only",
                        self.path, exc)
            return None
        return fd
