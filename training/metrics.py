"""What a run reports besides its CSVs: system and pipeline metrics, TensorBoard, status text.

No flags here: everything takes plain arguments.

    SystemMonitor     psutil figures of the learner and the actor processes, /dev/shm, GPU
    PipelineStats     per status interval: policy lag, batch wait, time per update, the
                      actors' time split (env step / inference / waiting for slots)
    TensorBoardLog    torch.utils.tensorboard.SummaryWriter into the run directory
    progress_bar, format_eta   pieces of the status line
"""

from __future__ import annotations

import os
import shutil

import psutil
import torch

MIB = 2**20
ACTOR_TIME_KEYS = ("env", "inference", "wait")  # what the actors time, in seconds


# --- system ------------------------------------------------------------------------
class SystemMonitor:
    """CPU % (since the previous call), RSS and open files of processes, by pid.

    psutil's `cpu_percent` measures since its previous call on the same Process
    object, so the objects are kept between calls (a restarted actor has a new pid
    and starts again at 0)."""

    def __init__(self, shm_path: str = "/dev/shm"):
        self.shm_path = shm_path
        self._procs: dict[int, psutil.Process] = {}

    def _proc(self, pid: int) -> psutil.Process | None:
        p = self._procs.get(pid)
        if p is None:
            try:
                p = psutil.Process(pid)
                p.cpu_percent(None)  # the first call only starts the clock
            except psutil.Error:
                return None
            self._procs[pid] = p
        return p

    def _sample(self, pid: int) -> tuple[float, float] | None:
        """(cpu %, rss MiB) of `pid`, None if it is gone."""
        p = self._proc(pid)
        if p is None:
            return None
        try:
            return p.cpu_percent(None), p.memory_info().rss / MIB
        except psutil.Error:
            self._procs.pop(pid, None)
            return None

    def sample(self, learner_pid: int, actor_pids: list[int | None]) -> dict[str, float]:
        """`system/...` scalars: the learner's CPU %, RSS (MiB), open files and fds; each
        actor's CPU % and RSS, and their sums; /dev/shm use; GPU memory and utilisation
        when CUDA is available."""
        out: dict[str, float] = {}
        live = {learner_pid, *(p for p in actor_pids if p is not None)}
        for pid in list(self._procs):
            if pid not in live:
                del self._procs[pid]
        got = self._sample(learner_pid)
        if got is not None:
            out["system/learner_cpu_percent"], out["system/learner_rss_mib"] = got
            try:
                p = self._procs[learner_pid]
                out["system/learner_open_files"] = float(len(p.open_files()))
                out["system/learner_fds"] = float(p.num_fds())
            except (psutil.Error, KeyError, AttributeError):
                pass
        cpu_sum = rss_sum = 0.0
        for i, pid in enumerate(actor_pids):
            got = None if pid is None else self._sample(pid)
            if got is None:
                continue
            out[f"system/actor{i}_cpu_percent"], out[f"system/actor{i}_rss_mib"] = got
            cpu_sum += got[0]
            rss_sum += got[1]
        out["system/actors_cpu_percent"] = cpu_sum
        out["system/actors_rss_mib"] = rss_sum
        out.update(shm_usage(self.shm_path))
        out.update(gpu_metrics())
        return out


def shm_usage(path: str = "/dev/shm") -> dict[str, float]:
    """Used MiB and used fraction of the shared-memory file system (empty if absent)."""
    if not os.path.isdir(path):
        return {}
    u = shutil.disk_usage(path)
    return {"system/shm_used_mib": u.used / MIB,
            "system/shm_used_fraction": u.used / u.total if u.total else 0.0}


def gpu_metrics() -> dict[str, float]:
    """GPU memory (MiB, allocated and reserved by torch) and utilisation %, if CUDA."""
    if not torch.cuda.is_available():
        return {}
    out = {"system/gpu_mem_allocated_mib": torch.cuda.memory_allocated() / MIB,
           "system/gpu_mem_reserved_mib": torch.cuda.memory_reserved() / MIB}
    try:
        out["system/gpu_utilization_percent"] = float(torch.cuda.utilization())
    except Exception:  # noqa: BLE001 - needs pynvml; not every machine has it
        pass
    return out


# --- pipeline ----------------------------------------------------------------------
def policy_lag(version: torch.Tensor, current: int) -> tuple[float, float]:
    """(mean, max) of `current - version[:-1]` over a batch's `version` [T+1, B]: how
    many learner updates behind the current weights the rollouts' actions were taken."""
    lag = (current - version[:-1]).float()
    return float(lag.mean()), float(lag.max())


class PipelineStats:
    """Sums over one status interval, turned into `pipeline/` and `perf/` scalars."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.updates = 0
        self.wait_s = 0.0
        self.update_s = 0.0
        self.lag_sum = 0.0
        self.lag_max = 0.0
        self.losses: dict[str, float] = {}
        self.actor_s = dict.fromkeys(ACTOR_TIME_KEYS, 0.0)

    def add_update(self, wait_s: float, update_s: float, lag_mean: float, lag_max: float,
                   stats: dict[str, float]) -> None:
        self.updates += 1
        self.wait_s += wait_s
        self.update_s += update_s
        self.lag_sum += lag_mean
        self.lag_max = max(self.lag_max, lag_max)
        for k, v in stats.items():
            self.losses[k] = self.losses.get(k, 0.0) + v

    def add_actor_times(self, times: dict[str, float]) -> None:
        for k, v in times.items():
            self.actor_s[k] = self.actor_s.get(k, 0.0) + v

    def lag(self) -> float | None:
        return self.lag_sum / self.updates if self.updates else None

    def scalars(self, interval_s: float) -> dict[str, float]:
        """The interval's means (per update) and sums (actor seconds); then reset."""
        out: dict[str, float] = {}
        n = self.updates
        if n:
            out["pipeline/policy_lag_mean"] = self.lag_sum / n
            out["pipeline/policy_lag_max"] = self.lag_max
            out["pipeline/batch_wait_s"] = self.wait_s / n
            out["perf/learner_update_s"] = self.update_s / n
            names = {"policy_loss": "losses/policy", "value_loss": "losses/value",
                     "entropy": "losses/entropy", "lr": "losses/lr"}
            for k, v in self.losses.items():
                out[names.get(k, f"losses/{k}")] = v / n
        if interval_s > 0:
            out["perf/updates_per_s"] = n / interval_s
            out["pipeline/batch_wait_fraction"] = self.wait_s / interval_s
        total = sum(self.actor_s.values())
        for k, v in self.actor_s.items():
            out[f"pipeline/actor_{k}_s"] = v
            if total > 0:
                out[f"pipeline/actor_{k}_fraction"] = v / total
        self.reset()
        return out


def replay_scalars(replays, free_slots: int) -> dict[str, float]:
    """Free rollout slots, and each replay's `stats()` (`replay.base.Replay`): the fill
    (len / capacity) and dropped rollouts of storage replays, queue lengths."""
    out = {"pipeline/free_slots": float(free_slots)}
    for i, r in enumerate(replays):
        out.update({f"pipeline/replay{i}_{k}": v for k, v in r.stats().items()})
    return out


# --- TensorBoard -------------------------------------------------------------------
class TensorBoardLog:
    """Event files in the run directory (`tensorboard --logdir results` finds them)."""

    def __init__(self, path: str):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=path, flush_secs=3600)  # flushed by the status

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, v in values.items():
            self.writer.add_scalar(tag, v, step)

    def episode(self, ret: float, length: int, env_steps: int, frames: int) -> None:
        self.writer.add_scalar("charts/episode_return", ret, env_steps)
        self.writer.add_scalar("charts/episode_length", length, env_steps)
        self.writer.add_scalar("charts/episode_return_vs_frames", ret, frames)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


# --- status line -------------------------------------------------------------------
def format_eta(seconds: float | None) -> str:
    """h:mm:ss, or "?" when unknown."""
    if seconds is None or seconds != seconds or seconds < 0 or seconds == float("inf"):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def progress_bar(fraction: float, width: int = 20) -> str:
    """[#####.....] 42%"""
    f = min(max(fraction, 0.0), 1.0)
    filled = int(f * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {f * 100:3.0f}%"


def progress(env_steps: int, max_env_steps: int, steps_per_s: float, tty: bool
             ) -> tuple[str, str]:
    """(the progress bar and a space when `tty`, else ""; the ETA to `max_env_steps`)."""
    left = max(max_env_steps - env_steps, 0)
    eta = format_eta(left / steps_per_s if steps_per_s > 0 else None)
    done = env_steps / max_env_steps if max_env_steps else 0.0
    return (f"{progress_bar(done)} " if tty else ""), eta
