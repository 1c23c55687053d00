"""SIGINT / SIGTERM: the first asks the run to stop cleanly, the second exits at once.

The first signal only sets a flag: the learner finishes the update in flight,
stops the actors, saves a checkpoint and exits 0. A second signal kills every
child process and exits immediately (status 128 + signal); checkpoints are
written through temporary files, so none that was complete is damaged. An exit
between a save and its pruning leaves one numbered checkpoint more than
--keep_checkpoints, which the next save removes.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys


class StopSignal:
    def __init__(self):
        self.received: int | None = None

    def install(self) -> StopSignal:
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        return self

    def __call__(self) -> bool:
        return self.received is not None

    def _handle(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum
            print(f"\n{signal.Signals(signum).name}: stopping the actors and saving a "
                  "checkpoint (send it again to exit at once)", file=sys.stderr, flush=True)
            return
        for child in multiprocessing.active_children():
            child.kill()
        os._exit(128 + signum)
