"""Show a game in a window, or record it to a video file when there is no display."""

from __future__ import annotations

import os

import numpy as np


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def gif_frame_ms(fps: int) -> int:
    """A GIF frame's duration in ms at `fps`: GIF counts in hundredths of a second."""
    return 10 * round(100 / fps)


class VideoSink:
    """`add(frame)` with uint8 [H, W] or [H, W, 3] frames; `close()` when done.

    With `path`, frames go to a video file that works headless: an mp4 (OpenCV), or,
    for a path ending in .gif, a looping GIF (Pillow; each frame reduced to a palette
    of at most 64 colours as it arrives, written at `close`); without, they are shown
    in a matplotlib window.
    """

    def __init__(self, path: str | None, fps: int = 30, scale: int = 1):
        self.path = path
        self.fps = fps
        self.scale = scale
        self._writer = None
        self._image = None
        self._gif: list | None = [] if path is not None and path.endswith(".gif") else None

    def add(self, frame: np.ndarray) -> None:
        import cv2

        if frame.ndim == 2:
            frame = np.repeat(frame[:, :, None], 3, axis=2)
        if self.scale != 1:
            frame = cv2.resize(frame, None, fx=self.scale, fy=self.scale,
                               interpolation=cv2.INTER_NEAREST)
        if self.path is None:
            self._show(frame)
            return
        if self._gif is not None:
            from PIL import Image

            self._gif.append(Image.fromarray(frame).convert("P", palette=Image.ADAPTIVE,
                                                           colors=64))
            return
        if self._writer is None:
            h, w = frame.shape[:2]
            self._writer = cv2.VideoWriter(self.path, cv2.VideoWriter_fourcc(*"mp4v"), self.fps,
                                           (w, h))
        self._writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))

    def _show(self, frame: np.ndarray) -> None:
        import matplotlib.pyplot as plt

        if self._image is None:
            plt.ion()
            self._image = plt.imshow(frame)
            plt.axis("off")
        else:
            self._image.set_data(frame)
        plt.pause(1.0 / self.fps)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
        if self._gif:
            first, *rest = self._gif
            first.save(self.path, save_all=True, append_images=rest, loop=0,
                       duration=gif_frame_ms(self.fps), optimize=True)
            self._gif = []
