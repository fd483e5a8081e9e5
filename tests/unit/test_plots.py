"""Figures drawn from a fixture store: the heatmap's cells and mask match the statistics; the files are images."""
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from plt_bench.analysis import plots, report
from plt_bench.pages import Page
from plt_bench.records import CellStats
from plt_bench.store import Store

from .trials import conditions, trial

PAGES = (Page(5000), Page(500_000), Page(5000, 200))  # in order of bytes: 5KB, 500KB, 200x5KB (1.01 MB)
RATES = (10**7, 10**8)
# (page, rate) -> (QUIC mean, TCP mean): QUIC faster, TCP faster, equal, QUIC faster, TCP faster, QUIC faster
MEANS = {("5KB", 10**7): (80, 100), ("5KB", 10**8): (120, 100), ("500KB", 10**7): (500, 500),
         ("500KB", 10**8): (90, 100), ("200x5KB", 10**7): (900, 700), ("200x5KB", 10**8): (300, 400)}


@pytest.fixture
def fixture_store(tmp_path):
    rng = np.random.default_rng(7)
    s = Store(tmp_path / "r.sqlite")
    cid = s.new_campaign("fixture", "t", {}, {"link_backend": "linkem"})
    seq = 0
    pages = {p.label: p for p in PAGES}
    for (label, rate), means in MEANS.items():
        for proto, mean in zip(("h3", "h1"), means):
            for r, v in enumerate(rng.normal(mean, 1.0, 8)):
                s.add_trial(trial(cid, seq, proto, plt=float(v), cond=conditions(rate_bps=rate), page=pages[label],
                                  run_index=r))
                seq += 1
    yield s, cid, tmp_path
    s.close()


def test_heatmap_matches_the_statistics_and_files_are_images(fixture_store):
    """Rows are pages in order of their bytes (the Long Look's composition x bandwidth figure)."""
    s, cid, tmp = fixture_store
    rep = report.build(s, [cid])
    m = plots.heatmap_matrix(rep["rows"])[(0.0, 0.0, 0.0)]
    assert m["pages"] == ["5KB", "500KB", "200x5KB"] and m["rates"] == [(r, None) for r in RATES]
    assert m["axis"] == "page (NxS: N images of S)"
    for r in rep["rows"]:
        i, j = m["pages"].index(r.page), m["rates"].index((r.rate_down_bps, None))
        assert m["diff"][i, j] == pytest.approx(r.diff_pct) and m["significant"][i, j] == r.significant
    sig = {(r.page, r.rate_down_bps): (r.significant, r.faster) for r in rep["rows"]}
    assert sig[("5KB", 10**7)] == (True, "h3") and sig[("5KB", 10**8)] == (True, "h1")
    assert sig[("500KB", 10**7)][0] is False  # equal means: white
    assert sig[("200x5KB", 10**7)] == (True, "h1") and sig[("200x5KB", 10**8)] == (True, "h3")
    assert {r.size_bytes for r in rep["rows"] if r.page == "200x5KB"} == {Page(5000, 200).total_bytes}
    files = plots.draw_all(rep["rows"], rep["cells"], rep["metadata"], tmp / "fig", "fixture")
    names = {f.name for f in files}
    assert {"heatmap_h3-vs-h1.png", "heatmap_h3-vs-h1.svg", "size.png", "size.svg"} <= names
    for f in files:
        if f.suffix == ".png":
            with Image.open(f) as im:
                im.verify()
                assert im.format == "PNG"
        else:
            assert ET.parse(f).getroot().tag.endswith("svg")
    md = report.write(rep, tmp / "rep")
    assert "| 10mbit | 5KB |" in md[0].read_text() and md[1].read_text().startswith("conditions,")


def test_loss_and_jitter_plots_need_two_levels(tmp_path):
    cells = {}
    for loss in (0.0, 1.0, 5.0):
        for proto in ("h3", "h1"):
            cells[(f"l{loss}", "5KB", proto)] = CellStats(
                conditions=f"l{loss}", page="5KB", size_bytes=5000, objects=0, proto=proto, cc="cubic", n=5, median_ms=100 + loss * 10,
                mean_ms=100 + loss * 10, sd_ms=5.0, cv=0.05, ci_low_ms=95.0, ci_high_ms=130.0 + loss, rate_down_bps=10**7,
                rtt_ms=50.0, jitter_ms=0.0, loss_pct=loss, n_cpu_bound=0, cpu_bound_roles="", n_cpu_unjudged=0)
    files = plots.loss_plot(cells, {"link_backend": "linkem"}, tmp_path, "t")
    assert [f.suffix for f in files] == [".png", ".svg"]
    assert plots.jitter_plot(cells, {}, tmp_path, "t") == []  # one jitter level: nothing to compare


def test_cpu_figures_and_report_from_stored_cpu(tmp_path):
    """CPU per trial and per MB from cpu_json totals (ratio of sums) and the CPU-over-time figure
    from stored samples."""
    import json
    s = Store(tmp_path / "c.sqlite")
    cid = s.new_campaign("cpu", "t", {}, {"link_backend": "linkem", "cpu_interval_s": 0.1})
    costs = {"h3": {"renderer": (0.4, 0.4), "network": (0.3, 0.2), "caddy": (0.2, 0.3), "zygote": (0.0, 0.01)},
             "h1": {"renderer": (0.4, 0.4), "network": (0.1, 0.3), "caddy": (0.01, 0.02)}}
    for seq, proto in enumerate(("h3", "h1")):
        roles = {r: {"user_s": u, "system_s": sy, "processes": 1} for r, (u, sy) in costs[proto].items()}
        tid = s.add_trial(trial(cid, seq, proto, plt=900.0, cond=conditions(rate_bps=10**8), run_index=0, wall_s=2.0,
                                cpu_json=json.dumps({"roles": roles, "launch": None})))
        rows = [{"role": r, "t_s": k * 0.1, "user_s": u * k / 10, "system_s": sy * k / 10}
                for r, (u, sy) in costs[proto].items() for k in range(11)]
        s.add_cpu_samples(tid, rows)
    rep = report.build(s, [cid])
    per = {(r["proto"], r["role"]): r for r in rep["cpu_by_role"]}
    assert per[("h3", "caddy")]["cpu_s_per_mb"] == pytest.approx(0.05)  # 0.5 s over 10 MB
    assert per[("h1", "network")]["system_s_per_mb"] == pytest.approx(0.03)
    assert per[("h3", "other")]["cpu_s_per_mb"] == pytest.approx(0.001)  # zygote folds into other
    assert set(rep["cpu_series"]) == {"h3", "h1"}
    files = plots.draw_all(rep["rows"], rep["cells"], rep["metadata"], tmp_path / "fig", "cpu",
                           rep["cpu_series"], rep["cpu_by_role"])
    names = {f.name for f in files}
    assert {"cpu_time.png", "cpu_time.svg", "cpu_per_mb.png", "cpu_per_mb.svg"} <= names
    with Image.open(tmp_path / "fig" / "cpu_time.png") as im:
        im.verify()
    written = report.write(rep, tmp_path / "rep")
    assert any(f.name == "cpu.csv" for f in written)
    assert "## CPU by role" in (tmp_path / "rep" / "report.md").read_text()
    assert "| h3 | caddy | 1 | 10 | 500 | 200 | 300 | 50 |" in (tmp_path / "rep" / "report.md").read_text()
    assert "CPU by role" in report.format_text(rep)
    s.close()


def test_the_html_report_holds_every_table_and_figure_inline(fixture_store):
    """report.html: one file, every table of the Markdown and every SVG figure inline, nothing to fetch."""
    from html.parser import HTMLParser
    s, cid, tmp = fixture_store
    rep = report.build(s, [cid])
    rep["warnings"] = rep["warnings"] + ["a <warning> & its escape"]
    files = report.write_all(rep, tmp / "all", "fixture #1")
    page = tmp / "all" / "report.html"
    assert page in files and (tmp / "all" / "report.md") in files
    svgs = sorted(f.stem for f in files if f.suffix == ".svg")

    class Tags(HTMLParser):
        def __init__(self):
            super().__init__()
            self.count, self.figures, self.fetches = {}, [], []

        def handle_starttag(self, tag, attrs):
            self.count[tag] = self.count.get(tag, 0) + 1
            a = dict(attrs)
            if tag == "figure":
                self.figures.append(a["id"])
            for k in ("src", "href"):
                if k in a and not (a[k] or "").startswith("#"):
                    self.fetches.append(a[k])
            if tag == "link" or tag == "script":
                self.fetches.append(tag)
    text = page.read_text()
    tags = Tags()
    tags.feed(text)
    assert sorted(tags.figures) == svgs and len(svgs) >= 2
    assert tags.count["svg"] == len(svgs) and tags.count["table"] == len(report.blocks(rep))
    assert tags.fetches == []  # self-contained: no file, script, style sheet or font from elsewhere
    assert "<?xml" not in text and "a &lt;warning&gt; &amp; its escape" in text
    assert text.count("<tr>") == sum(len(rows) for _, _, rows in report.blocks(rep))


def test_cpu_bound_trials_mark_their_cell_in_the_table_the_warnings_and_the_heatmap(fixture_store):
    """Three of a cell's eight QUIC trials limited by the network process: the cell alone is marked
    (stored and read back: the columns survive the store), in the table, the warnings and hatched."""
    s, cid, tmp = fixture_store
    rows = s.db.execute("SELECT id FROM trials WHERE proto = 'h3' AND page = '500KB' AND rate_down_bps = ? "
                        "ORDER BY id LIMIT 3", (10**8,)).fetchall()
    s.db.executemany("UPDATE trials SET cpu_bound = 'network', cpu_bound_share = 0.8 WHERE id = ?", rows)
    s.db.commit()
    rep = report.build(s, [cid])
    m = plots.heatmap_matrix(rep["rows"])[(0.0, 0.0, 0.0)]
    assert m["cpu_bound"].sum() == 1 and m["cpu_bound"][m["pages"].index("500KB"), m["rates"].index((10**8, None))]
    head, *body = report.table(rep)
    marks = {(r[0], r[1]): r[head.index("CPU-bound")] for r in body}
    assert marks[("100mbit", "500KB")] == "h3 3/8 network" and set(marks.values()) == {"h3 3/8 network", "-"}
    assert any("3 of 8 trials CPU-bound (network)" in w for w in rep["warnings"])
    files = plots.heatmaps(rep["rows"], rep["metadata"], tmp / "fig", "fixture")
    svg = next(f for f in files if f.suffix == ".svg").read_text()
    assert "<pattern" in svg and "CPU-bound trials" in svg  # the hatch and its legend
    s.db.execute("UPDATE trials SET cpu_bound = NULL")
    s.db.commit()
    clean = report.build(s, [cid])
    svg = next(f for f in plots.heatmaps(clean["rows"], clean["metadata"], tmp / "fig2", "fixture")
               if f.suffix == ".svg").read_text()
    assert "<pattern" not in svg and "CPU-bound trials" not in svg


def test_every_report_format_shows_hostile_names_as_text(tmp_path):
    """Issue 26: a profile named <script>alert(1)</script> appeared raw in report.md, and a|b broke
    its table row. Every format shows such names as text, each row keeps its cells."""
    s = Store(tmp_path / "r.sqlite")
    cid = s.new_campaign("fixture", "t", {}, {"link_backend": "linkem"})
    seq = 0
    for name in ("<script>alert(1)</script>", "a|b"):
        for proto, mean in (("h3", 90.0), ("h1", 100.0)):
            for r in range(3):
                s.add_trial(trial(cid, seq, proto, plt=mean + r, cond=conditions(name), run_index=r, size=5000))
                seq += 1
    rep = report.build(s, [cid])
    s.close()
    text = report.markdown(rep)
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt; (10mbit)" in text, text
    assert "a\\|b (10mbit)" in text
    for table in text.split("\n## ")[1:]:  # every row of a table has as many cells as its head
        rows = [x for x in table.splitlines() if x.startswith("|")]
        widths = {len(x.replace("\\|", "").split("|")) for x in rows}
        assert len(widths) <= 1, rows
    page = report.html(rep, [])
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_a_report_that_runs_out_of_disk_leaves_no_empty_or_cut_file(fixture_store, monkeypatch):
    """Issue 36: a report that ran out of disk left a 0-byte PNG. Every report file is written whole
    (a temporary renamed into place) or not at all; the message names the folder."""
    import errno
    from matplotlib.figure import Figure
    from plt_bench.errors import PltBenchError
    s, cid, tmp = fixture_store
    rep = report.build(s, [cid])
    real = Figure.savefig

    def full(self, fname, *a, **kw):
        if str(fname).endswith(".tmp") and ".png." in str(fname):
            open(fname, "wb").close()  # what a full disk leaves: the file made, nothing in it
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, fname, *a, **kw)
    monkeypatch.setattr(Figure, "savefig", full)
    folder = tmp / "full"
    with pytest.raises(PltBenchError, match=f"could not be written to {folder}: No space left on device"):
        report.write_files(lambda: report.write_all(rep, folder, "fixture #1"), folder)
    left = sorted(folder.iterdir())
    assert not [p for p in left if p.suffix == ".png" or p.name.endswith(".tmp") or p.stat().st_size == 0], left


@pytest.mark.parametrize("metric,short", [("plt", "PLT"), ("lcp", "LCP"), ("ttfb", "TTFB")])
def test_the_loss_jitter_and_size_figures_name_the_metric_they_plot(tmp_path, monkeypatch, metric, short):
    """A figure of LCP says LCP on its axis and in its title, and its file is named for it (beside PLT's)."""
    cells = {}
    for size in (5000, 500_000):
        for loss in (0.0, 1.0):
            for jitter in (0.0, 5.0):
                for proto in ("h3", "h1"):
                    cells[(size, loss, jitter, proto)] = CellStats(
                        conditions=f"l{loss}j{jitter}", page=f"{size // 1000}KB", size_bytes=size, objects=0, proto=proto,
                        cc="cubic", n=5, median_ms=100.0, mean_ms=100.0, sd_ms=5.0, cv=0.05, ci_low_ms=95.0,
                        ci_high_ms=105.0, rate_down_bps=10**7, rtt_ms=50.0, jitter_ms=jitter, loss_pct=loss,
                        n_cpu_bound=0, cpu_bound_roles="", n_cpu_unjudged=0, metric=metric)
    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, out, stem: drawn.append((stem, fig)) or [])
    for draw in (plots.loss_plot, plots.jitter_plot, plots.size_plot):
        draw(cells, {"link_backend": "linkem"}, tmp_path, "t")
    assert {stem.split("_")[0] for stem, _ in drawn} == {"loss", "jitter", "size"}
    for stem, fig in drawn:
        assert stem.endswith("" if metric == "plt" else f"_{metric}"), stem
        labels = [ax.get_ylabel() for ax in fig.axes] + [fig._suptitle.get_text() if fig._suptitle else "",
                                                         fig.axes[0].get_title()]
        text = " ".join(labels)
        assert short in text and (metric == "plt" or "PLT" not in text), (stem, labels)


def test_the_visitor_table_writes_the_lcp_element_as_an_element(tmp_path):
    """A heading that was the largest paint reads <h1>, not h1 (which reads as the protocol), in the
    text and in the HTML report (escaped there); a cell without one reads '-'."""
    s = Store(tmp_path / "r.sqlite")
    cid = s.new_campaign("v", "t", {}, {"link_backend": "linkem"})
    for seq in range(8):
        proto = ("h3", "h1")[seq % 2]
        s.add_trial(trial(cid, seq, proto, plt=300.0 + seq, fcp_ms=200.0, lcp_ms=250.0, ttfb_ms=90.0,
                          lcp_element="h1" if proto == "h3" else None, page=Page(5000), run_index=seq // 2))
    rep = report.build(s, [cid])
    s.close()
    text = report.format_text(rep)
    visitor = text[text.index("What a visitor sees"):].splitlines()
    h3_row = next(line for line in visitor if " h3 " in f" {line} " and "5KB" in line)
    h1_row = next(line for line in visitor if " h1 " in f" {line} " and "5KB" in line)
    assert "<h1>" in h3_row and "<h1>" not in h1_row and " - " in h1_row, (h3_row, h1_row)
    page = report.html(rep, [])
    assert "&lt;h1&gt;" in page and "<h1>" not in page.split("What a visitor sees", 1)[1].split("</table>", 1)[0]


def test_a_report_over_two_browsers_compares_protocols_within_each_and_draws_a_heatmap_each(tmp_path):
    """--browser chromium,firefox: the table compares h3 with h1 within each browser (and with
    --compare browser each browser against Chromium within each protocol), one heatmap per browser,
    the connection table per browser; the figures and facts name the browsers."""
    rng = np.random.default_rng(3)
    s = Store(tmp_path / "r.sqlite")
    cid = s.new_campaign("b", "t", {"compare": "proto", "browser": ["chromium", "firefox"]},
                         {"link_backend": "linkem", "chromium": "Chromium 142", "firefox": "Mozilla Firefox 140.7.0esr",
                          "geckodriver": "geckodriver 0.37.1"})
    seq = 0
    means = {("h3", "chromium"): 300, ("h1", "chromium"): 400, ("h3", "firefox"): 450, ("h1", "firefox"): 420}
    for (proto, browser), mean in means.items():
        for r, v in enumerate(rng.normal(mean, 2.0, 6)):
            s.add_trial(trial(cid, seq, proto, plt=float(v), cond=conditions(rate_bps=10**7, rtt_ms=50.0),
                              page=Page(5000), run_index=r, browser=browser, connect_ms=60.0, ttfb_ms=110.0))
            seq += 1
    rep = report.build(s, [cid])
    assert rep["browsers"] == ["chromium", "firefox"]
    assert sorted(report.table(rep)[i][2] for i in (1, 2)) == ["h3 vs h1 (chromium)", "h3 vs h1 (firefox)"]
    faster = {r.browser: r.faster for r in rep["rows"]}
    assert faster == {"chromium": "h3", "firefox": "h1"}
    text = report.format_text(rep)
    assert any("Chromium: Chromium 142; Firefox: Mozilla Firefox 140.7.0esr (geckodriver 0.37.1)" in line
               for line in report.facts(rep))
    establishment = text[text.index("Connection establishment"):].splitlines()
    assert any("chromium" in line for line in establishment) and any("firefox" in line for line in establishment)
    files = {f.name for f in plots.draw_all(rep["rows"], rep["cells"], rep["metadata"], tmp_path / "fig", "b")}
    assert {f"heatmap_h3-vs-h1_{b}_rtt50_jitter0_loss0.png" for b in ("chromium", "firefox")} <= files
    along = report.build(s, [cid], axis="browser")
    assert along["reference"] == "chromium"
    assert sorted(r.pair for r in along["rows"]) == ["chromium vs firefox (h1)", "chromium vs firefox (h3)"]
    assert "each browser against chromium" in report.format_text(along)
    files = {f.name for f in plots.draw_all(along["rows"], along["cells"], along["metadata"], tmp_path / "f2", "b")}
    assert {f"heatmap_chromium-vs-firefox_{p}_rtt50_jitter0_loss0.png" for p in ("h3", "h1")} <= files
    s.close()


def test_times_and_sizes_are_labelled_as_people_read_them():
    assert [plots.time_label(v) for v in (0, 0.5, 40, 250, 999, 1000, 1500, 12_000)] == [
        "0 ms", "0.5 ms", "40 ms", "250 ms", "999 ms", "1 s", "1.5 s", "12 s"]
    assert [plots.size_label(v) for v in (800, 5000, 500_000, 1.5e6, 7e8)] == ["800 B", "5 KB", "500 KB", "1.5 MB",
                                                                             "700 MB"]


def _size_axes(cells, tmp_path, monkeypatch):
    """The size figure of these cells, drawn as it is saved: its axes."""
    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, out, stem: drawn.append(fig) or [])
    plots.size_plot(cells, {"link_backend": "linkem"}, tmp_path, "t")
    (fig,) = drawn
    fig.canvas.draw()
    return fig.axes[0]


def test_the_size_figure_reads_in_kb_and_ms_not_powers_of_ten(tmp_path, monkeypatch):
    """Its axes were 10^4 .. 10^7 and 2x10^-1 (issue 47): now the sizes run and the times in ms and s."""
    cells = {}
    for size in (5000, 50_000, 500_000, 10**7):
        for proto in ("h3", "h1"):
            cells[(size, proto)] = CellStats(
                conditions="10mbit", page=f"{size // 1000}KB", size_bytes=size, objects=0, proto=proto, cc="cubic", n=5,
                median_ms=80.0 + size / 1000, mean_ms=80.0, sd_ms=5.0, cv=0.05, ci_low_ms=75.0, ci_high_ms=85.0,
                rate_down_bps=10**7, rtt_ms=50.0, jitter_ms=0.0, loss_pct=0.0, n_cpu_bound=0, cpu_bound_roles="",
                n_cpu_unjudged=0)
    ax = _size_axes(cells, tmp_path, monkeypatch)
    xs = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    ys = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert xs == ["5 KB", "50 KB", "500 KB", "10 MB"], xs
    assert ys and all(y.endswith((" ms", " s")) for y in ys) and not any("^" in t for t in xs + ys), ys


@pytest.mark.parametrize("span_ms, expected", [
    ((130.0, 1200.0), {"200 ms", "500 ms", "1 s"}),  # the default run's figure labelled '1 s' alone (issue 59)
    ((130.0, 250.0), {"200 ms"}),
    ((50.0, 400_000.0), {"100 ms", "1 s", "10 s", "100 s"}),
])
def test_a_log_time_axis_of_a_few_decades_is_labelled_in_readable_steps(tmp_path, monkeypatch, span_ms, expected):
    """Issue 59: a log axis across 0.13-1.2 s labelled one tick ('1 s'); within one to three decades it
    now labels 1, 2 and 5 of each (100 ms, 200 ms, 500 ms, 1 s), within less every step, over more
    the decades alone."""
    lo, hi = span_ms
    cells = {}
    for size, ms in ((5000, lo), (500_000, (lo * hi) ** 0.5), (10**7, hi)):
        cells[(size, "h3")] = CellStats(
            conditions="10mbit", page=f"{size // 1000}KB", size_bytes=size, objects=0, proto="h3", cc="cubic", n=5,
            median_ms=ms, mean_ms=ms, sd_ms=5.0, cv=0.05, ci_low_ms=ms, ci_high_ms=ms, rate_down_bps=10**7,
            rtt_ms=50.0, jitter_ms=0.0, loss_pct=0.0, n_cpu_bound=0, cpu_bound_roles="", n_cpu_unjudged=0)
    ax = _size_axes(cells, tmp_path, monkeypatch)
    low, high = ax.get_ylim()
    shown = {t.get_text() for t in ax.get_yticklabels() if t.get_text() and low <= t.get_position()[1] <= high}
    assert expected <= shown and len(shown) >= 2 and len(shown) <= 12, shown


def test_a_bimodal_cell_shows_its_two_modes_and_the_ks_test_sees_what_welch_does_not(tmp_path):
    """h3 loads in 900 or 1100 ms (a slow-start loss or none), half each; h1 always near 1000 ms: the
    means agree (Welch: not significant), the distributions do not (KS), the report says so, and the
    distribution figure draws every trial."""
    rng = np.random.default_rng(3)
    s = Store(tmp_path / "r.sqlite")
    cid = s.new_campaign("bimodal", "t", {}, {"link_backend": "linkem"})
    values = {"h3": [900.0 + rng.normal(0, 2) for _ in range(10)] + [1100.0 + rng.normal(0, 2) for _ in range(10)],
              "h1": list(rng.normal(1000, 5, 20))}
    seq = 0
    for proto, vs in values.items():
        for r, v in enumerate(vs):
            s.add_trial(trial(cid, seq, proto, plt=float(v), cond=conditions(rate_bps=10**7), page=Page(5000),
                              run_index=r))
            seq += 1
    rep = report.build(s, [cid])
    (row,) = rep["rows"]
    assert not row.significant and row.p_ks < 0.05, (row.p_welch, row.p_ks)  # 0.98 and 0.012 with this seed
    assert any("distributions differ (KS p" in w for w in rep["warnings"]), rep["warnings"]
    assert "KS p" in report.format_text(rep)
    drawn = plots.distribution_plot(rep["cells"], rep["samples"], rep["metadata"], tmp_path / "fig", "t")
    assert [p.name for p in drawn] == ["distribution.png", "distribution.svg"]
    assert sorted(len(v) for v in rep["samples"].values()) == [20, 20]
    s.close()


def test_a_waterfall_draws_the_median_trial_s_requests_each_by_the_protocol_it_used(tmp_path, monkeypatch):
    """Per protocol the median trial (of 3: the middle one, a real trial), its document then its
    objects by start, each with the protocol the browser says it used (a cross-origin entry that
    does not say: none) and whether it set up a connection; the panel names the trial."""
    import json

    from plt_bench.pages import origin_host, page_url

    def at(host: str, path: str) -> str:  # a request's name as Resource Timing gives it, on a testbed origin
        return page_url(host, f"/{path}")
    nav = {"startTime": 0, "connectStart": 8.0, "connectEnd": 110.0, "responseStart": 170.0, "responseEnd": 300.0,
           "nextHopProtocol": "h3", "name": at(origin_host(0), "index.html")}

    def res(name, start, end, hop, new=False):
        return {"name": at(origin_host(0), name), "startTime": start, "connectStart": start,
                "connectEnd": start + (60 if new else 0), "responseStart": end - 10, "responseEnd": end,
                "nextHopProtocol": hop}
    ts, seq = [], 0
    for proto, hop in (("h3", "h3"), ("h1", "http/1.1")):
        for plt in (900.0, 500.0, 700.0):
            resources = [res("b.png", 320, 600, hop, new=proto == "h1"), res("a.png", 310, 400, hop),
                         {**res("x.js", 315, 500, ""), "name": at(origin_host(1), "x.js")}]
            ts.append(trial(1, seq, proto, plt=plt, cond=conditions(rate_bps=10**7), page=Page(5000, 3),
                            nav_json=json.dumps({**nav, "nextHopProtocol": hop}), resources_json=json.dumps(resources)))
            seq += 1
    t = plots.median_trial(ts[:3], [x.plt_ms for x in ts[:3]])
    assert (t.seq, t.plt_ms) == (2, 700.0)
    rows = plots.requests_of(ts[3])
    assert [(r["name"].rsplit("/", 1)[1], r["proto"], r["new_connection"]) for r in rows] == [
        ("index.html", "h1", True), ("a.png", "h1", False), ("x.js", None, False), ("b.png", "h1", True)]
    from plt_bench.analysis import stats
    cells = stats.cells(ts)
    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, out, stem: drawn.append((stem, fig)) or [])
    plots.waterfall_plot(ts, cells, {"link_backend": "linkem"}, tmp_path, "t")
    ((stem, fig),) = drawn
    assert stem.startswith("waterfall_") and [ax.get_title().split(":")[0] for ax in fig.axes[:2]] == ["h3", "h1"]
    assert "trial 2 (run 2), the median of 3: PLT 700 ms" in fig.axes[0].get_title()
    assert [x.get_text() for x in fig.axes[1].get_yticklabels()] == ["index.html", "a.png", f"{origin_host(1)} x.js", "b.png"]


def test_a_filmstrip_shows_what_each_protocol_s_median_trial_showed_on_one_time_axis(tmp_path, monkeypatch):
    import io

    from plt_bench import visual

    def jpeg(shade: int) -> bytes:
        buf = io.BytesIO()
        Image.new("RGB", (64, 40), (shade, shade, shade)).save(buf, "JPEG")
        return buf.getvalue()
    frames, ts, seq = {}, [], 0
    for proto, first in (("h3", 200.0), ("h1", 400.0)):
        for plt in (600.0, 500.0, 700.0):
            t = trial(1, seq, proto, plt=plt, cond=conditions(rate_bps=10**7), page=Page(5000, 3), fcp_ms=first,
                      lcp_ms=first + 50, first_visual_change_ms=first)
            path = tmp_path / f"{seq}.zip"
            visual.write_frames(str(path), [(first, [[1]], jpeg(90)), (first + 50, [[2]], jpeg(30))])
            frames[(1, seq)] = str(path)
            ts.append(t)
            seq += 1
    assert plots.frame_at(visual.read_frames(frames[(1, 0)]), 100.0) is None  # nothing shown yet
    assert plots.frame_at(visual.read_frames(frames[(1, 0)]), 230.0) == jpeg(90)
    from plt_bench.analysis import stats
    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, out, stem: drawn.append((stem, fig)) or [])
    plots.filmstrip_plot(ts, stats.cells(ts), frames, {"link_backend": "linkem"}, tmp_path, "t")
    ((stem, fig),) = drawn
    assert stem.startswith("filmstrip_")
    h3, h1 = fig.axes[:2]
    assert "trial 0 (run 0), the median of 3" in h3.get_title(loc="left") and "trial 3 (run 3)" in h1.get_title(loc="left")
    # 8 steps of 600 / 7 ms to the medians' load at 600 ms: h3 shows a frame from 200 ms on (5 steps), h1 from 400 (3)
    assert len(h3.images) == 5 and len(h1.images) == 3
    assert {x.get_text().split()[0] for x in h3.texts} == {"FCP", "LCP", "load"}
    assert plots.filmstrip_plot(ts, stats.cells(ts), {}, {}, tmp_path, "t") == []  # no frames: no filmstrip


def test_the_page_axis_says_what_its_labels_are():
    """The corpus's heatmaps named their axis 'page (NxS: N images of S)' over recordings (issue 59: every
    figure read as a reader sees it)."""
    assert plots._page_axis([{"page": "5KB"}, {"page": "10MB"}]) == "page size"
    assert plots._page_axis([{"page": "5KB"}, {"page": "4o:20x5KB"}]).startswith("page (NxS: N images of S")
    assert plots._page_axis([{"page": "har:real-eigen"}, {"page": "har:real-flask"}]) == "page"
