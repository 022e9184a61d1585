"""The daemon's worker threads, which always start from and return to its home netns.

setns() changes one thread, and a new thread inherits its creator's namespace, so workers
are only ever spawned by the main thread (which never leaves home). A worker checks it is
home before its first job and after every job; one that cannot get back retires, and the
main thread (woken through ``wake``) spawns its replacement.

A call that outlives its deadline may keep its worker busy in code that cannot be
interrupted; ``borrow()`` then lets the pool grow by one thread (up to ``max_extra``) until
that job returns, so a hung call does not cost the others a worker.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

from pycni.net import ns as netns

log = logging.getLogger("pycni.daemon")

Job = Callable[[], None]


class WorkerPool:
    def __init__(self, size: int, *, max_extra: int, wake: Callable[[], None]) -> None:
        self.size = size
        self.max_extra = max_extra
        self._wake = wake
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._target = size
        self._stopping = False
        self.retired = 0
        self.home_fd = os.open(netns.THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
        st = os.fstat(self.home_fd)
        self.home = (st.st_dev, st.st_ino)

    # ---- main thread ---------------------------------------------------------------------

    def maintain(self) -> None:
        """Spawn workers up to the target (main thread only: new threads inherit its netns)."""
        assert not _is_worker(), "workers must be spawned by the daemon's main thread"
        while True:
            with self._lock:
                if self._stopping or len(self._threads) >= self._target:
                    return
                thread = threading.Thread(target=self._worker, name="pycni-worker", daemon=True)
                self._threads.append(thread)
            thread.start()

    def submit(self, job: Job) -> None:
        self._jobs.put(job)

    def pending(self) -> int:
        """Jobs submitted that no worker took yet (any thread; the metrics' queue depth)."""
        return self._jobs.qsize()

    def borrow(self) -> bool:
        """A job overran its deadline and holds its worker: add one thread. False at the cap."""
        with self._lock:
            if self._target >= self.size + self.max_extra:
                return False
            self._target += 1
        self.maintain()
        return True

    def stop(self, timeout: float = 1.0) -> None:
        with self._lock:
            self._stopping = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join(timeout=timeout)

    @property
    def workers(self) -> int:
        with self._lock:
            return len(self._threads)

    # ---- worker threads ------------------------------------------------------------------

    def give_back(self) -> None:
        """The borrowed thread's overrunning job returned: shrink the target again."""
        with self._lock:
            self._target = max(self.size, self._target - 1)

    def _at_home(self) -> bool:
        try:
            st = os.stat(netns.THREAD_NETNS)
            if (st.st_dev, st.st_ino) == self.home:
                return True
            netns.setns(self.home_fd)
            st = os.stat(netns.THREAD_NETNS)
            return (st.st_dev, st.st_ino) == self.home
        except OSError:
            return False

    def _leave(self, *, retired: bool) -> None:
        with self._lock:
            self._threads.remove(threading.current_thread())
            if retired:
                self.retired += 1
        if retired:
            log.error("a worker could not return to the daemon's netns; replacing it")
            self._wake()  # the main thread spawns the replacement

    def _worker(self) -> None:
        _local.worker = True
        if not self._at_home():  # cannot happen when spawned by the main thread; checked anyway
            self._leave(retired=True)
            return
        while True:
            job = self._jobs.get()
            if job is None:
                self._leave(retired=False)
                return
            try:
                job()
            except Exception:
                log.exception("unexpected error in a worker")
            if not self._at_home():
                self._leave(retired=True)
                return
            with self._lock:
                if len(self._threads) > self._target:  # a borrowed thread no longer needed
                    self._threads.remove(threading.current_thread())
                    return


_local = threading.local()


def _is_worker() -> bool:
    return bool(getattr(_local, "worker", False))
