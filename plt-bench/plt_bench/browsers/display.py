"""A virtual display and a recording of it: how a browser with no screencast of its own (Firefox)
shows its frames for capture kind `visual` (plt_bench.visual judges them).

The display: an X server that draws into memory (Debian's Xvfb), started by the worker in the client
namespace before the browser, its screen the browser's window. It listens on the namespace's own
abstract socket alone (-nolisten unix: no socket file; -nolock: no lock file; -displayfd: the first
number free in the namespace), so it leaves nothing on the file system even when killed, and no
other namespace sees it. The browser runs headed on it, in kiosk mode: the page fills the screen, with
no toolbar, tab strip or throbber to change while it loads.

The recording: ffmpeg grabs the screen (x11grab, through shared memory) FPS times a second from just
before the navigation until the paints are read, each frame scaled to 1/SCALE a side (nearest
neighbour, the cheapest scaler) and written raw (RGB, no encoder) into a file beside the trial's
profile (whose path in ffmpeg's command line marks it as the trial's, for the sweep and `clean`). A frame's time is when it was grabbed, on the wall clock: ffmpeg's input start (its first
frame's grab) plus the frame's pts, both from its log (the showinfo filter prints each frame's pts).
A change is therefore seen up to 1/FPS after it was painted, as in browsertime's video (30 fps by
default); Chromium's screencast stamps each frame with the paint's own swap time instead.

Measured on this machine (2026-11-28): Xvfb starts in about 0.15 s; the grab at 30 fps and 1/4 scale
costs ffmpeg about 12% of a core; its bias on the load is in docs/results.md ("Firefox's visual
capture").

Everything here but `start_display` and `Recording` is pure.
"""

from __future__ import annotations

import os
import re
import subprocess
import time

FPS = 30     # frames grabbed a second (browsertime's default)
SCALE = 4    # each side of a grabbed frame divided by this (a 1280x800 window: 320x200 frames, 192 KB)
RAW_SUFFIX = ".frames.rgb"  # the recording's file, beside the trial's profile (removed after the load)
LOG_SUFFIX = ".frames.log"  # ffmpeg's log beside it (a file: a pipe left unread would fill and stall the grab)
START_TIMEOUT_S = 10.0   # Xvfb names its display within this, or the trial fails saying so
STOP_TIMEOUT_S = 5.0     # ffmpeg ends its recording within this after being asked, or is killed
NICE = 19  # ffmpeg's niceness: on a busy machine the load's own processes go first (a grab only comes later)


def window_size(args: list[str], default: tuple[int, int]) -> tuple[int, int]:
    """The window Firefox's command line asks for (--width=W, --height=H), else default (pure)."""
    size = dict(zip(("width", "height"), default))
    for a in args:
        m = re.fullmatch(r"--(width|height)=(\d+)", a)
        if m:
            size[m.group(1)] = int(m.group(2))
    return size["width"], size["height"]


def xvfb_command(width: int, height: int, displayfd: int) -> list[str]:
    """Xvfb's command line: a screen of the window's size, 24-bit colour, reachable on the namespace's
    abstract socket alone, its display's number written to displayfd (pure)."""
    return ["Xvfb", "-displayfd", str(displayfd), "-nolock", "-nolisten", "tcp", "-nolisten", "unix",
            "-screen", "0", f"{width}x{height}x24"]


def frame_size(width: int, height: int, scale: int = SCALE) -> tuple[int, int]:
    """A grabbed frame's size after scaling (even sides, as the scaler rounds them) (pure)."""
    return max(2, width // scale // 2 * 2), max(2, height // scale // 2 * 2)


def grab_command(display: str, width: int, height: int, out_path: str, fps: int = FPS,
                 scale: int = SCALE) -> list[str]:
    """ffmpeg's command line that grabs the display's whole screen fps times a second until asked to
    stop ('q' on its input), scaled by 1/scale, raw RGB frames into out_path, every frame kept as
    grabbed (no frame rate conversion: -fps_mode passthrough), each frame's pts in its log (pure)."""
    w, h = frame_size(width, height, scale)
    return ["nice", "-n", str(NICE), "ffmpeg", "-hide_banner", "-nostats", "-loglevel", "info", "-draw_mouse", "0",
            "-f", "x11grab", "-framerate", str(fps), "-video_size", f"{width}x{height}", "-i", display,
            "-vf", f"scale={w}:{h}:flags=neighbor,showinfo", "-fps_mode", "passthrough",
            "-pix_fmt", "rgb24", "-f", "rawvideo", "-y", out_path]


_START = re.compile(r"Input #0, x11grab.*?\n.*?start: (\d+\.\d+)", re.S)
_PTS = re.compile(r"\[Parsed_showinfo_\d+ @ [^\]]+\] n:\s*\d+ pts:\s*-?\d+ pts_time:(-?[\d.e+-]+)")


def grab_times(log: str) -> list[float]:
    """Each recorded frame's grab time (seconds since the epoch) from ffmpeg's log: the input's start
    plus each frame's pts_time, in the order the frames were written (pure). ValueError where the log
    does not give the start."""
    m = _START.search(log)
    if not m:
        raise ValueError("ffmpeg's log gives no start time for the grab")
    start = float(m.group(1))
    return [start + float(t) for t in _PTS.findall(log)]


# -- the worker's side (in the client namespace) ------------------------------------------------------
def start_display(width: int, height: int) -> tuple[subprocess.Popen, str]:
    """An Xvfb of the window's size, a child of the worker (the trial's sweep ends it with the
    browser); (its process, its display name, ':N'). RuntimeError where it names no display."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(xvfb_command(width, height, w), pass_fds=(w,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    finally:
        os.close(w)
    try:
        number = _read_number(r, proc)
    finally:
        os.close(r)
    if number is None:
        proc.kill()
        err = proc.communicate(timeout=5)[1].decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"Xvfb named no display within {START_TIMEOUT_S:g} s: {' | '.join(err[-2:])}"[:400])
    return proc, f":{number}"


def _read_number(fd: int, proc: subprocess.Popen) -> str | None:
    import select
    got, deadline = b"", time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if select.select([fd], [], [], 0.1)[0]:
            chunk = os.read(fd, 32)
            if not chunk:
                break
            got += chunk
            if got.endswith(b"\n"):
                return got.strip().decode()
    return None


class Recording:
    """The display's frames while the page loads: ffmpeg started before the navigation (its files at
    prefix + RAW_SUFFIX and LOG_SUFFIX), ended once the paints are read; then [(grab time, seconds since
    the epoch; RGB bytes)], each frame of `size`."""

    def __init__(self, display: str, width: int, height: int, prefix: str):
        self.path, self.log = prefix + RAW_SUFFIX, prefix + LOG_SUFFIX
        self.size = frame_size(width, height)
        self.error: str | None = None
        self.proc = None
        try:
            with open(self.log, "wb") as log:
                self.proc = subprocess.Popen(grab_command(display, width, height, self.path), stdin=subprocess.PIPE,
                                             stdout=subprocess.DEVNULL, stderr=log)
            self._wait_first_frame()
        except Exception as e:  # noqa: BLE001 - the trial goes on without its visual figures, saying why
            self.error = f"display recording: {type(e).__name__}: {e}"[:300]
            self.close()

    def _wait_first_frame(self) -> None:
        """Until the first frame is written (ffmpeg's start and the grab's set-up take 0.1-0.2 s):
        the page before the navigation is then among the frames."""
        one = self.size[0] * self.size[1] * 3
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ffmpeg ended at once: {self._log_text()[-300:]}")
            try:
                if os.path.getsize(self.path) >= one:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"no frame grabbed within {START_TIMEOUT_S:g} s")

    def stop(self) -> list[tuple[float, bytes]]:
        """End the recording; its frames, [(grab time, RGB bytes)] in order. Raises where they cannot be read."""
        if self.proc is None:
            raise RuntimeError(self.error or "not recording")
        try:
            self.proc.communicate(b"q", timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
        self.proc = None
        times = grab_times(self._log_text())
        one = self.size[0] * self.size[1] * 3
        with open(self.path, "rb") as f:
            data = f.read()
        self.close()
        count = min(len(times), len(data) // one)
        return [(times[i], data[i * one:(i + 1) * one]) for i in range(count)]

    def _log_text(self) -> str:
        try:
            with open(self.log, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """ffmpeg ended (killed if still grabbing) and its files removed."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (self.path, self.log):
            try:
                os.unlink(f)
            except OSError:
                pass


class DisplayFrames:
    """A browser's frames from its display's recording (Browser.frames where the browser runs on
    start_display): started before the navigation, judged once the paints are read."""

    def __init__(self, display: str, window: tuple[int, int], prefix: str):
        self.recording = Recording(display, window[0], window[1], prefix)

    def finish(self, driver, loaded: bool, frames_path: str | None = None) -> dict:
        """The load's visual figures (visual.judge), or why there are none."""
        from .. import visual
        rec = self.recording
        if rec.error:
            return {"error": rec.error}
        time.sleep(visual.TAIL_S)  # the last paint reaches the screen and the next grab
        try:
            frames = rec.stop()
        except Exception as e:  # noqa: BLE001 - the trial goes on without its visual figures, saying why
            rec.close()
            return {"error": f"display recording: {type(e).__name__}: {e}"[:300]}
        return visual.load_figures(driver, loaded, frames, lambda raw: visual.histogram_rgb(raw, rec.size),
                                   frames_path, encode=lambda raw: visual.jpeg_of_rgb(raw, rec.size))

    def close(self) -> None:
        self.recording.close()
