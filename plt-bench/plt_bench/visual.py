"""Visual progress of a load (capture kind `visual`): first visual change, SpeedIndex and visually
complete, from the frames Chromium paints.

How the frames are had: the browser worker opens the page's own DevTools socket (a second client
beside chromedriver's, on the namespace's loopback) and asks for a screencast (Page.startScreencast,
JPEG): Chromium sends a frame each time what it shows changes, stamped with the frame's swap time
(seconds since the epoch), and waits for each to be acknowledged. The frames are kept as they come;
nothing is decoded before the load's figures are read.

How progress is judged: as WebPageTest's visualmetrics and speedline do, by colour histograms. Each
frame's per-channel histogram (near-white pixels left out: the blank page counts as nothing shown)
is compared with the first and the last frame's: the share of the difference between the two that
the frame has made, each bucket matched within SLOP buckets of the last's, averaged over the three
channels. The last frame is the page as it stands once the load's figures are read.

- first visual change: the first frame whose progress is above 0 (ms from the navigation's start);
- visually complete: the first frame from which progress stays at 1 (VISUALLY_COMPLETE);
- SpeedIndex: the integral of (1 - progress) from the navigation's start to visually complete, in
  ms: the mean time at which the page's pixels became what they end as (Meenan, WebPageTest 2012).

How the frames are had is the browser's (Browser.frames): Chromium's screencast (above), or a
recording of the virtual display a browser runs on (browsers.display: Firefox). `judge` turns either's
frames into the figures.

Everything here but the histograms and `judge` (Pillow, a dependency of matplotlib) is pure.
"""

from __future__ import annotations

import io

SLOP = 5  # histogram buckets a colour may move and still match (JPEG and scaling move colours a little)
# a pixel whose three channels are all above this counts as the blank page's: near-white within 4%.
# Firefox's window shows #F9F9FB before a page paints, and a page's own #FAFAFA background then drew
# a "first visual change" no one could see, a second before the page's first content (swagger, 2026-11-28);
# at 250 both counted as shown
WHITE = 244
VISUALLY_COMPLETE = 0.999  # progress at or above this is complete (rounding over three channels)
TAIL_S = 0.2  # how long after the paints are read the frames are still taken (a last paint's frame is on its way)


def histogram(jpeg: bytes) -> list[list[int]]:
    """The frame's histogram per channel (R, G, B: 256 buckets each), near-white pixels left out."""
    from PIL import Image
    return _histogram(Image.open(io.BytesIO(jpeg)))


def histogram_rgb(raw: bytes, size: tuple[int, int]) -> list[list[int]]:
    """histogram of a raw RGB frame (3 bytes a pixel, rows of size[0] pixels: a display's recording)."""
    from PIL import Image
    return _histogram(Image.frombytes("RGB", size, raw))


def jpeg_of_rgb(raw: bytes, size: tuple[int, int], quality: int = 85) -> bytes:
    """A raw RGB frame as JPEG (a kept frame of a display's recording, for frames.zip)."""
    from PIL import Image
    out = io.BytesIO()
    Image.frombytes("RGB", size, raw).save(out, "JPEG", quality=quality)
    return out.getvalue()


def _histogram(image) -> list[list[int]]:
    from PIL import ImageChops
    channels = image.convert("RGB").split()
    white = [c.point(lambda v: 255 if v > WHITE else 0) for c in channels]
    shown = ImageChops.invert(ImageChops.multiply(ImageChops.multiply(white[0], white[1]), white[2]))
    return [c.histogram(shown) for c in channels]


def progress(frame: list[list[int]], start: list[list[int]], final: list[list[int]], slop: int = SLOP) -> float:
    """How far a frame has come from start to final, 0 to 1 (WebPageTest's per-channel matching)."""
    shares = []
    for ch in range(3):
        available = [abs(frame[ch][i] - start[ch][i]) for i in range(256)]
        total = matched = 0
        for i in range(256):
            target = abs(final[ch][i] - start[ch][i])
            if not target:
                continue
            total += target
            for j in range(max(0, i - slop), min(256, i + slop + 1)):
                take = min(target, available[j])
                available[j] -= take
                matched += take
                target -= take
                if not target:
                    break
        shares.append(matched / total if total else 1.0)
    return sum(shares) / 3


def metrics(frames: list[tuple[float, list[list[int]]]]) -> dict:
    """{first_visual_change_ms, speed_index_ms, visually_complete_ms, frames} from frames
    [(ms from the navigation's start, histogram)] in time order; the first is the page before
    anything of the load was shown (at or before 0), the last the page as it ends. None for each
    figure where the frames do not tell (fewer than two, or nothing ever changed)."""
    out = {"first_visual_change_ms": None, "speed_index_ms": None, "visually_complete_ms": None,
           "frames": len(frames)}
    if len(frames) < 2:
        return out
    start, final = frames[0][1], frames[-1][1]
    if start == final:
        return out
    points = [(max(0.0, t), progress(h, start, final)) for t, h in frames[1:]]
    first = next((t for t, p in points if p > 0), None)
    complete = None
    for k, (t, p) in enumerate(points):
        if p >= VISUALLY_COMPLETE and all(q >= VISUALLY_COMPLETE for _, q in points[k:]):
            complete = t
            break
    index, last_t, last_p = 0.0, 0.0, 0.0
    for t, p in points:
        if complete is not None and t > complete:
            break
        index += (t - last_t) * (1.0 - last_p)
        last_t, last_p = t, p
    out.update(first_visual_change_ms=first, visually_complete_ms=complete,
               speed_index_ms=index if complete is not None else None)
    return out


# -- the frames kept for the report's filmstrips (frames.zip) ------------------------------------------
MAX_KEPT_FRAMES = 60  # a trial's frames in its frames.zip: where the page changed, evenly thinned past this


def frames_to_keep(frames: list[tuple[float, list[list[int]]]], most: int = MAX_KEPT_FRAMES,
                   pinned: tuple[float | None, ...] = ()) -> list[int]:
    """Which of the frames [(ms, histogram)] to keep (their indices, in order): the first, each that
    differs from the one kept before it (what a viewer would see change), and the last; past `most`,
    evenly thinned, the first, the last and the frames at the pinned times (the first visual change,
    visually complete: metrics' figures) always kept (pure)."""
    if not frames:
        return []
    keep = [0]
    for i in range(1, len(frames)):
        if frames[i][1] != frames[keep[-1]][1]:
            keep.append(i)
    if keep[-1] != len(frames) - 1:
        keep.append(len(frames) - 1)
    fixed = {0, len(frames) - 1} | {i for i, (ms, _) in enumerate(frames) for p in pinned if p is not None and ms == p}
    if len(keep) + len(fixed - set(keep)) > most:
        rest = [i for i in keep if i not in fixed]
        room = max(most - len(fixed), 0)
        step = len(rest) / room if room else 0
        keep = sorted(fixed | {rest[int(k * step)] for k in range(room)})
    else:
        keep = sorted(set(keep) | fixed)
    return keep


def frame_name(ms: float) -> str:
    """A kept frame's name in frames.zip: its ms from the navigation's start, sortable ('000123.4.jpg')."""
    return f"{max(ms, 0.0):08.1f}.jpg"


def write_frames(path: str, frames: list[tuple[float, list[list[int]], bytes]],
                 pinned: tuple[float | None, ...] = (), encode=None) -> int:
    """Write the frames to keep of [(ms, histogram, JPEG)] to a zip at path (whole or not at all),
    those at the pinned times among them; the number kept. encode: makes a kept frame's JPEG of its
    third element where that is not JPEG already (a raw frame: only the kept ones are encoded)."""
    import os
    import zipfile
    keep = frames_to_keep([(ms, h) for ms, h, _ in frames], pinned=pinned)
    tmp = f"{path}.tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:  # JPEG: nothing left to compress
        for i in keep:
            z.writestr(frame_name(frames[i][0]), encode(frames[i][2]) if encode else frames[i][2])
    os.replace(tmp, path)
    return len(keep)


def read_frames(path) -> list[tuple[float, bytes]]:
    """The frames of a frames.zip, [(ms, JPEG)] in time order; OSError or ValueError (zipfile's
    BadZipFile) where it cannot be read."""
    import zipfile
    with zipfile.ZipFile(path) as z:
        return sorted((float(n[:-4]), z.read(n)) for n in z.namelist() if n.endswith(".jpg"))


def judge(frames: list[tuple[float, bytes]], origin_s: float, histogram_of, frames_path: str | None = None,
          encode=None) -> dict:
    """A load's figures (metrics) from its frames [(time, seconds since the epoch; image)] in time
    order, the navigation's start at origin_s (performance.timeOrigin): the page before the load
    showed anything is the last frame at or before the start, else a blank one; with frames_path,
    the frames where the page changed written there (write_frames; encode as there).
    histogram_of(image): histogram or histogram_rgb."""
    shown = [((t - origin_s) * 1000.0, histogram_of(image)) for t, image in frames]
    before = [f for f in shown if f[0] <= 0]
    blank = before[-1] if before else (0.0, [[0] * 256 for _ in range(3)])
    figures = metrics([blank] + [f for f in shown if f[0] > 0])
    if frames_path:
        try:
            figures["frames_kept"] = write_frames(
                frames_path, [(ms, h, image) for (ms, h), (_, image) in zip(shown, frames) if ms > 0],
                pinned=(figures["first_visual_change_ms"], figures["visually_complete_ms"]), encode=encode)
        except OSError as e:
            figures["frames_error"] = f"{type(e).__name__}: {e}"[:300]
    return figures


def load_figures(driver, loaded: bool, frames: list[tuple[float, bytes]], histogram_of,
                 frames_path: str | None = None, encode=None) -> dict:
    """A load's figures from the frames its browser took (Browser.frames; judge), timed against the
    page's own navigation start (performance.timeOrigin, through the driver); {"error": why} where
    the page did not load or its frames cannot be judged."""
    if not loaded:
        return {"error": "the page did not load", "frames": len(frames)}
    try:
        origin_s = driver.execute_script("return performance.timeOrigin") / 1000.0
        return judge(frames, origin_s, histogram_of, frames_path, encode)
    except Exception as e:  # noqa: BLE001 - the trial goes on without its visual figures, saying why
        return {"error": f"frames: {type(e).__name__}: {e}"[:300], "frames": len(frames)}
