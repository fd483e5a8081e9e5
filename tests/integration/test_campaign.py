"""A tiny real campaign: interrupted halfway with SIGINT, resumed without repeating a finished
trial, and drawn."""
import signal
import sqlite3
import subprocess
import time

from PIL import Image

from ..conftest import CLI, ROOT, run_cli
from .conftest import rendered_figures

TINY = """
name = "tiny"
description = "2 sizes x 2 rates x 2 protocols"
protos = ["quic", "tcp"]
sizes = ["5KB", "50KB"]
runs = 1
retries = 1
[link]
bw = ["10mbit", "50mbit"]
verify = "off"
"""


def _ok_trials(db_path):
    """The ok trials so far; none while the run is still creating the store (file there, tables not yet)."""
    db = sqlite3.connect(db_path)
    try:
        return db.execute("SELECT conditions, run_index, size_bytes, proto FROM trials WHERE status='ok'").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


def interrupt_once(p, results, enough, testbed: int, timeout=240):
    """Ctrl-C to a running campaign (CLI or pytest) once enough(results) holds; (stdout, stderr). A
    run still alive after that is killed and what it left is cleaned."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            assert p.poll() is None, p.communicate()
            if results.exists() and enough(results):
                break
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        return p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            run_cli("clean", "--testbed", str(testbed), timeout=120)


def test_interrupt_resume_and_draw(tmp_path):
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY)
    results = tmp_path / "r.sqlite"
    p = subprocess.Popen([*CLI, "run", str(spec), "--results", str(results), "--testbed", "210"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = interrupt_once(p, results, lambda r: len(_ok_trials(r)) >= 4, testbed=210)
    assert p.returncode == 130, err
    first = _ok_trials(results)
    assert 4 <= len(first) < 8, len(first)
    assert "run the same command again to resume" in err

    r = run_cli("run", str(spec), "--results", str(results), "--testbed", "210", timeout=400)
    # 1: on a busy machine a slot may be refused twice (the emulator fell behind), and is said to be
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"resuming campaign 1: {len(first)} of 8 trials already done" in r.stdout
    final = _ok_trials(results)
    assert len(final) == len(set(final))  # every trial once: none repeated
    assert set(first) <= set(final) and (len(final) == 8) == (r.returncode == 0)
    db = sqlite3.connect(results)
    assert db.execute("SELECT COUNT(DISTINCT conditions || run_index || size_bytes || proto) FROM trials"
                      ).fetchone()[0] == 8  # every slot tried
    pairs = db.execute("SELECT COUNT(*) FROM (SELECT size_bytes FROM trials WHERE status = 'ok' AND conditions = "
                       "'10mbit' GROUP BY size_bytes HAVING COUNT(DISTINCT proto) = 2)").fetchone()[0]
    assert db.execute("SELECT COUNT(*), MIN(status), MAX(status) FROM campaigns").fetchone() == (1, "finished", "finished")
    assert db.execute("SELECT COUNT(*) FROM trials WHERE busy_pct IS NULL OR load1 IS NULL").fetchone()[0] == 0
    db.close()
    folder = tmp_path / "r-tiny-1"  # beside r.sqlite (not the default store): the store's name first
    heat = folder / "heatmap_h3-vs-h1.png"  # the file's quic and tcp are h3 and h1
    with Image.open(heat) as im:
        im.verify()
    rows = [x for x in (folder / "report.md").read_text().splitlines() if x.startswith("| 10mbit |")]
    assert len([x for x in rows if " vs " in x]) == pairs  # the comparisons (the visitor table has the cells too)
    # report.html in the real Chromium: every figure of the folder is in it, and drawn
    tables: list = []
    shown = rendered_figures(folder / "report.html", tmp_path / "chromium-profile", tables)
    assert set(shown) == {f.stem for f in folder.glob("*.svg")} and "heatmap_h3-vs-h1" in shown
    assert "distribution" in shown and not any(f.startswith("waterfall") for f in shown), sorted(shown)  # one object
    assert all(ink > 0.01 for ink in shown.values()), shown
    # every table of the report drawn, with its rows: the comparison first, a row per pair and a head
    md_tables = (folder / "report.md").read_text().count("\n|---|")
    assert len(tables) == md_tables and all(rows >= 2 and cols >= 2 and px > 20 for _, rows, cols, px in tables), tables
    compared = sum(1 for x in (folder / "report.md").read_text().split("\n\n## ")[1].splitlines() if " vs " in x)
    assert tables[0][0].startswith("Page-load time") and tables[0][1] == 1 + compared >= 1 + pairs, tables[0]

    p2 = run_cli("plot", "1", "--results", str(results), timeout=120)
    assert p2.returncode == 0 and "heatmap_h3-vs-h1.png" in p2.stdout
    rep = run_cli("report", str(spec), "--results", str(results), timeout=120)
    assert rep.returncode == 0 and "50mbit" in rep.stdout
