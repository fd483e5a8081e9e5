"""Visual progress from frames (plt_bench.visual), on frames made here with known answers."""
import io

import pytest
from PIL import Image

from plt_bench import visual


def _jpeg(fill=None, box=(0, 0, 100, 100), size=(100, 100)) -> bytes:
    img = Image.new("RGB", size, (255, 255, 255))
    if fill:
        img.paste(fill, box)
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90)
    return out.getvalue()


def test_a_blank_frame_shows_nothing_and_half_a_page_is_half_way():
    blank, half, full = (visual.histogram(_jpeg()), visual.histogram(_jpeg((200, 0, 0), (0, 0, 100, 50))),
                         visual.histogram(_jpeg((200, 0, 0))))
    assert [sum(c) for c in blank] == [0, 0, 0]  # near-white pixels are the blank page's
    assert sum(full[0]) == 10_000 and 4_900 <= sum(half[0]) <= 5_200
    assert visual.progress(half, blank, full) == pytest.approx(0.5, abs=0.02)
    assert visual.progress(full, blank, full) == 1.0 and visual.progress(blank, blank, full) == 0.0
    # a colour JPEG moved by a bucket or two still matches (SLOP); a different colour does not
    near = visual.histogram(_jpeg((202, 2, 1)))
    assert visual.progress(near, blank, full) == pytest.approx(1.0, abs=0.01)
    assert visual.progress(visual.histogram(_jpeg((0, 0, 200))), blank, full) < 0.4


def _h(k: int) -> list[list[int]]:
    """A histogram of k non-white pixels of one colour."""
    return [[k if i == 100 else 0 for i in range(256)] for _ in range(3)]


def test_speed_index_is_the_area_above_the_progress_curve_up_to_visually_complete():
    frames = [(-5.0, _h(0)), (100.0, _h(50)), (300.0, _h(100)), (400.0, _h(100))]
    m = visual.metrics(frames)
    # nothing for 100 ms, half for 200 ms: 100 + 200 x 0.5
    assert m == {"first_visual_change_ms": 100.0, "speed_index_ms": pytest.approx(200.0),
                 "visually_complete_ms": 300.0, "frames": 4}
    # a page that looks done, then changes again, is complete only when it stops changing
    back = visual.metrics([(0.0, _h(0)), (100.0, _h(100)), (200.0, _h(50)), (500.0, _h(100))])
    assert back["visually_complete_ms"] == 500.0 and back["speed_index_ms"] == pytest.approx(100 + 150)
    # nothing changed, or too few frames: no figures, never a made-up one
    assert visual.metrics([(0.0, _h(5)), (100.0, _h(5))])["speed_index_ms"] is None
    assert visual.metrics([(0.0, _h(5))]) == {"first_visual_change_ms": None, "speed_index_ms": None,
                                               "visually_complete_ms": None, "frames": 1}


def test_the_frames_kept_are_each_change_the_first_and_last_and_thinned_past_the_most():
    from plt_bench import visual
    h = lambda k: [[k] * 4]  # noqa: E731 - a histogram that differs by k
    frames = [(0.0, h(0)), (10.0, h(0)), (20.0, h(1)), (30.0, h(1)), (40.0, h(2)), (50.0, h(2))]
    assert visual.frames_to_keep(frames) == [0, 2, 4, 5]  # blank, two changes, the page as it ends
    many = [(float(i), h(i)) for i in range(200)]
    kept = visual.frames_to_keep(many, most=10)
    assert len(kept) == 10 and kept[:2] == [0, 1] and kept[-1] == 199 and kept == sorted(set(kept))
    assert visual.frames_to_keep([]) == []


def test_frames_written_and_read_back_in_time_order_by_their_ms(tmp_path):
    from plt_bench import visual
    frames = [(5.25, [[1]], b"a"), (250.0, [[2]], b"b"), (1250.5, [[2]], b"c"), (2000.0, [[3]], b"d")]
    n = visual.write_frames(str(tmp_path / "frames.zip"), frames)
    assert n == 3 and visual.read_frames(tmp_path / "frames.zip") == [(5.2, b"a"), (250.0, b"b"), (2000.0, b"d")]
    assert not (tmp_path / "frames.zip.tmp").exists()


def test_the_first_visual_change_is_kept_however_many_frames_are_thinned():
    from plt_bench import visual
    h = lambda k: [[k] * 4]  # noqa: E731
    many = [(float(i), h(i)) for i in range(200)]
    kept = visual.frames_to_keep(many, most=10, pinned=(137.0, None))
    assert len(kept) == 10 and {0, 137, 199} <= set(kept) and kept == sorted(set(kept))


def _raw(fill=None, box=(0, 0, 100, 100), size=(100, 100)) -> bytes:
    img = Image.new("RGB", size, (255, 255, 255))
    if fill:
        img.paste(fill, box)
    return img.tobytes()


def test_a_displays_raw_frames_are_judged_as_a_screencasts_and_only_the_kept_encoded(tmp_path):
    # a display's recording (browsers.display): raw RGB frames timed on the wall clock, the navigation
    # at 1000.0 s; the frame before it is the page before the load, the last the page as it ends
    size = (100, 100)
    frames = [(999.98, _raw()), (1000.1, _raw()), (1000.2, _raw((200, 0, 0), (0, 0, 100, 50))),
              (1000.3, _raw((200, 0, 0))), (1000.4, _raw((200, 0, 0)))]
    encoded = []

    def encode(raw):
        encoded.append(raw)
        return visual.jpeg_of_rgb(raw, size)
    got = visual.judge(frames, 1000.0, lambda raw: visual.histogram_rgb(raw, size), str(tmp_path / "f.zip"), encode)
    assert got["first_visual_change_ms"] == pytest.approx(200.0) and got["visually_complete_ms"] == pytest.approx(300.0)
    assert got["speed_index_ms"] == pytest.approx(200 + 100 * 0.5, abs=3)  # blank to 200 ms, half to 300
    assert got["frames"] == 5 and got["frames_kept"] == 4  # the blank after the start, two changes, the end
    assert len(encoded) == 4
    kept = visual.read_frames(tmp_path / "f.zip")
    assert [ms for ms, _ in kept] == [pytest.approx(100.0), pytest.approx(200.0), pytest.approx(300.0), pytest.approx(400.0)]
    assert visual.histogram(kept[-1][1]) != visual.histogram(kept[0][1])
    # the same frames as JPEG, as Chromium's screencast gives them, come to the same figures
    jpegs = [(t, visual.jpeg_of_rgb(raw, size)) for t, raw in frames]
    same = visual.judge(jpegs, 1000.0, visual.histogram)
    assert {k: same[k] for k in ("first_visual_change_ms", "visually_complete_ms")} == \
        {k: got[k] for k in ("first_visual_change_ms", "visually_complete_ms")}
