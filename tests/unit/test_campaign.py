"""Campaign files, presets, the plan's order, resume bookkeeping."""
import dataclasses

import pytest

from plt_bench import campaign
from plt_bench.errors import UsageError
from plt_bench.pages import Page


def test_presets_load_and_match_the_seed():
    p = campaign.presets()
    assert {"pages", "loss", "jitter", "profiles", "quick"} <= set(p)
    pages = campaign.load("pages")
    assert [c.rate_down_bps for c in pages.grid.conditions] == [10**6, 5 * 10**6, 10**7, 5 * 10**7, 10**8, 5 * 10**8, 10**9]
    assert [p.size_bytes for p in pages.grid.pages] == [5000, 500_000, 10**7, 5 * 10**7] and len(pages.plan()) == 4 * 7 * 3 * 5
    loss = campaign.load("loss")
    assert [c.loss_pct for c in loss.grid.conditions] == [0, 0.1, 1, 5, 7, 10]
    jit = campaign.load("jitter")
    assert [(c.rtt_ms, c.jitter_ms) for c in jit.grid.conditions] == [(112, 0), (112, 10)]
    prof = campaign.load("profiles")
    cable = [c for c in prof.grid.conditions if c.name == "Cable"][0]
    assert (cable.rate_down_bps, cable.rate_up_bps, cable.rtt_ms) == (5 * 10**6, 10**6, 28)
    assert cable.label == "Cable (5mbit/1mbit rtt28ms)"
    assert {"3GFast", "LTE", "DSL", "FIOS"} <= {c.name for c in prof.grid.conditions}
    for name, loss in (("longlook", 0), ("longlook-loss", 1)):  # the Long Look's pages, about 1 MB each
        ll = campaign.load(name)
        assert [(p.objects, p.size_bytes) for p in ll.grid.pages] == [(200, 5000), (100, 10**4), (10, 10**5),
                                                                      (5, 2 * 10**5), (2, 5 * 10**5), (1, 10**6)]
        assert [(c.rate_down_bps, c.rtt_ms, c.loss_pct) for c in ll.grid.conditions] == [
            (r * 10**6, 112, loss) for r in (10, 50, 100)]
        assert ll.as_dict()["sizes"][0] == "200x5KB"
    dr = campaign.load("datarate-loss")  # the Mininet seeds' grid, a 30 s download per trial
    assert [(p.bulk_ms, p.interval_ms) for p in dr.grid.pages] == [(30_000, 1000)] and dr.as_dict()["sizes"] == ["bulk30s"]
    assert sorted({(c.rate_down_bps, c.rtt_ms, c.loss_pct) for c in dr.grid.conditions}) == sorted(
        (r * 10**6, rtt, loss) for r in (5, 10, 100) for rtt in (24, 100, 500) for loss in (0, 2.5, 5, 7.5, 10))
    lat = campaign.load("latency")  # connections x streams x message size, at two RTTs
    assert [(p.requests, p.size_bytes, p.streams) for p in lat.grid.pages] == [
        (100, size, c) for size in (1000, 64000) for c in (1, 10, 100)]
    assert [c.rtt_ms for c in lat.grid.conditions] == [24, 100]
    est = campaign.load("establishment")
    assert [c.rtt_ms for c in est.grid.conditions] == [10, 50, 100, 200] and est.as_dict()["sizes"] == [5000]


def test_a_campaign_of_single_object_pages_keeps_its_identity():
    """Multi-object pages came with the schema 7; a single-object campaign's definition, and so its
    hash (resume finds it by the hash), is what it was: sizes in bytes."""
    spec = campaign.load("quick", {"size": "5KB,10MB", "bw": "10mbit", "runs": "2", "proto": "both", "seed": 1,
                                   "rtt": "0"})  # quick's RTT (50 ms since issue 27) off: the old grid
    assert spec.as_dict()["sizes"] == [5000, 10**7]
    assert spec.spec_hash == "b9f4e013d0a2afd8"  # what the plt-bench of schema 6 (commit ca1c112) computed


def test_overrides_win_and_change_the_identity():
    base = campaign.load("loss")
    o = campaign.load("loss", {"bw": "100mbit", "rtt": "20ms", "runs": "2"})
    assert {c.rate_down_bps for c in o.grid.conditions} == {10**8} and {c.rtt_ms for c in o.grid.conditions} == {20}
    assert o.grid.runs == 2 and o.spec_hash != base.spec_hash
    assert campaign.load("loss").spec_hash == base.spec_hash  # stable


def test_a_precision_target_plans_the_most_runs_and_is_part_of_the_identity():
    fixed = campaign.load("quick", {"size": "5KB", "bw": "10mbit", "runs": "3"})
    p = campaign.load("quick", {"size": "5KB", "bw": "10mbit", "runs": "3", "precision": "2%", "max_runs": "8"})
    assert (p.precision_pct, p.max_runs, p.grid.runs, p.planned_runs) == (2.0, 8, 3, 8)
    assert len(p.plan()) == 16 and len(fixed.plan()) == 6 and fixed.precision_pct is None
    assert p.plan()[:6] == fixed.plan()  # the first runs are the fixed campaign's, in its order
    assert p.spec_hash != fixed.spec_hash and "precision_pct" not in fixed.as_dict()
    assert campaign.load("quick", {"size": "5KB", "bw": "10mbit", "runs": "3", "precision": "2%"}).max_runs == 30


def _write(tmp_path, text):
    f = tmp_path / "c.toml"
    f.write_text(text)
    return str(f)


@pytest.mark.parametrize("text,fragment", [
    ("name = 'x'\nbogus = 1\n", "unknown key(s) bogus"),
    ("name = 'x\n", "not valid TOML"),
    ("runs = 0\n", ": runs: 0 is out of range"),
    ("retries = -1\n", "retries = -1"),
    ("[link]\nbw = 'fast'\n", ": bw: 'fast' is not a rate"),
    ("[link]\nspeed = '1mbit'\n", "[link] has unknown key(s) speed"),
    ("[[profile]]\nname = 'a'\n", "profile 1 needs name and bw"),
    ("[link]\nbw = '1mbit'\n[[profile]]\nname = 'a'\nbw = '1mbit'\n", "either [[profile]] entries or bw"),
    ("[link]\nverify = 'sometimes'\n", ": verify: 'sometimes'; expected one of"),
    ("[link]\nrtt = '10ms'\njitter = '20ms'\n", ": jitter: 20ms of uniform jitter"),
    # issue 26: as strict as the options, each value named as the file gives it
    ("max_runs = 5\n", ": max_runs: only with precision"),
    ("description = ['a', 'b']\n", ": description = ['a', 'b']; expected a string"),
    ("runs = '3'\n", ": runs = '3'; expected a whole number"),
    ("[link]\ncc = 3\n", ": cc = 3; expected a string or a list of strings"),
    ("[link]\ncc = ['bbr', 'vegas']\n", ": cc: unknown congestion control 'vegas'"),
    ("[link]\ncc = 'vegas'\n", ": cc: unknown congestion control 'vegas'"),
    ("warmup = 3\nruns = 2\n", ": warmup = 3 with runs 2: every run would be a warm-up"),
    ("[link]\nrtt = ['10ms', '10.0000001ms']\n", ": rtt: '10.0000001ms' is finer than the link applies"),
    ("[[profile]]\nname = 'a'\nbw = '1mbit'\nloss = '99.9999999%'\n", ": profile 1 loss: '99.9999999%' is finer"),
    ("runs = 1000\nsizes = ['5KB', '6KB', '7KB', '8KB', '9KB']\nprotos = 'both'\n[link]\nbw = "
     "['1mbit', '2mbit', '3mbit', '4mbit', '5mbit', '6mbit', '7mbit', '8mbit', '9mbit', '10mbit', '11mbit']\n",
     "the campaign: 110,000 trials, more than 100,000"),
])
def test_bad_campaign_files_name_the_file_and_the_problem(tmp_path, text, fragment):
    with pytest.raises(UsageError) as e:
        campaign.load(_write(tmp_path, text))
    assert "campaign file" in str(e.value) and fragment in str(e.value)


def test_unknown_campaign():
    with pytest.raises(UsageError, match="neither a preset"):
        campaign.load("no-such-campaign")


def test_plan_interleaves_protocols_in_a_seeded_random_order():
    spec = campaign.load("pages", {"bw": "10mbit", "runs": "4"})
    plan = spec.plan()
    assert len(plan) == 4 * 4 * 3 and len(set((x.run_index, x.page, x.proto) for x in plan)) == len(plan)
    for i in range(0, len(plan), 3):  # each size: its three protocols back to back
        assert plan[i][2] == plan[i + 1][2] == plan[i + 2][2] and {x[3] for x in plan[i:i + 3]} == {"h3", "h2", "h1"}
    orders = [[x.page for x in plan if x.run_index == run][::3] for run in range(4)]
    assert len({tuple(o) for o in orders}) > 1  # the order changes between repetitions
    assert len({x.proto for x in plan[::3]}) == 3  # no protocol always goes first
    assert spec.plan() == plan  # seeded: the same every time


def test_todo_finds_cells_by_their_fields_and_skips_finished_and_exhausted_trials():
    from plt_bench import session
    from .trials import trial
    spec = campaign.load("quick", {"size": "5KB", "runs": "2", "proto": "h1"})
    cond = spec.grid.conditions[0]
    stored = [trial(seq=0, run_index=0, proto="h1", size=5000, cond=cond),
              trial(seq=1, run_index=1, proto="h1", size=5000, cond=cond, status="failed")]
    done = session.attempts_so_far(stored)
    assert session.todo(spec.plan(), done, spec.retries) == [(cond, 1, Page(5000), "h1", "cubic", "chromium", "caddy", "full", 1)]  # retries = 1: one more
    done = session.attempts_so_far(stored + [trial(seq=2, run_index=1, proto="h1", size=5000, cond=cond,
                                                   status="failed")])
    assert session.todo(spec.plan(), done, spec.retries) == []
    # a trial under other conditions with the same rate is another cell, whatever its label says
    import dataclasses
    other = dataclasses.replace(cond, queue_pkts=500)
    done = session.attempts_so_far([trial(seq=0, run_index=0, proto="h1", size=5000, cond=other)])
    assert len(session.todo(spec.plan(), done, spec.retries)) == 2
    # a multi-object page is its own cell: found by its objects and their size, not by its bytes
    spec = campaign.load("quick", {"size": "5KB,3x5KB", "runs": "1", "proto": "h1"})
    done = session.attempts_so_far([trial(seq=0, run_index=0, proto="h1", page=Page(5000, 3), cond=cond)])
    assert session.todo(spec.plan(), done, spec.retries) == [(cond, 0, Page(5000), "h1", "cubic", "chromium", "caddy", "full", 1)]
    # a Firefox trial is Firefox's slot, never Chromium's; a trial stored before the browser was is Chromium's
    spec = campaign.load("quick", {"size": "5KB", "runs": "1", "proto": "h1", "browser": "chromium,firefox"})
    done = session.attempts_so_far([trial(seq=0, run_index=0, proto="h1", size=5000, cond=cond, browser="firefox")])
    assert [s.browser for s in session.todo(spec.plan(), done, spec.retries)] == ["chromium"]
    done = session.attempts_so_far([trial(seq=0, run_index=0, proto="h1", size=5000, cond=cond, browser=None)])
    assert [s.browser for s in session.todo(spec.plan(), done, spec.retries)] == ["firefox"]


def test_a_campaign_of_every_kind_resumes_without_planning_its_trials_again(open_tmp_path):
    """A stored trial's page is its label read back by the page parser (campaign.Slot.of): a campaign of
    pages of every kind resumes with nothing left to run once each slot has its ok trial. Until
    2026-11-29 the store's fields were rebuilt by a switch of their own, and js20x10KB came back as
    20x10KB and a url: page as a single page, so a rerun planned them again."""
    from plt_bench import session
    from plt_bench.pages import page_url, parse_page
    from .trials import trial
    (open_tmp_path / "d").mkdir()
    docs = "url:" + page_url("docs.pkg.test", "/")
    sizes = ["5KB", "20x5KB", "4o:8x5KB", "js20x10KB", docs, "bulk2s", "req10x1KB_c2"]
    spec = campaign.bare({"size": ",".join(sizes), "runs": "2", "proto": "h2,h1", "visit": "first,repeat",
                          "folder": f"docs.pkg.test={open_tmp_path / 'd'}"})
    plan = spec.plan()
    # the repeats are of the kinds that build them (pages.PageKind.repeatable), as --size X@repeat
    assert {s.page.label for s in plan} == {*sizes, "5KB@repeat", "20x5KB@repeat", "4o:8x5KB@repeat"}
    stored = [trial(seq=i, run_index=s.run_index, proto=s.proto, page=s.page, cond=s.conditions)
              for i, s in enumerate(plan)]
    assert {t.page for t in stored} >= {"js20x10KB", docs}
    done = session.attempts_so_far(stored)
    assert session.todo(plan, done, spec.retries) == []
    assert {s.page for s in done} == {s.page for s in plan}
    assert parse_page("js20x10KB") != parse_page("20x10KB")  # the two a rebuild by fields told apart by nothing
    # a label the parser no longer takes (its recording gone) is no slot of any plan, and stops nothing
    gone = session.attempts_so_far([dataclasses.replace(stored[0], page="har:gone")])
    assert [s.page for s in gone] == ["har:gone"] and len(session.todo(plan, gone, spec.retries)) == len(plan)


def test_key_metadata_diff_and_eta():
    from plt_bench import session
    a = {"host": "h", "kernel": "k", "link_backend": "linkem", "chromium": "156", "chromedriver": "156",
         "caddy_version": "v2", "congestion_control": "cubic"}
    assert session.key_metadata_diff(a, dict(a)) == []
    assert session.key_metadata_diff(a, dict(a, chromium="157")) == ["chromium: '156' then, '157' now"]
    spec = campaign.load("quick")
    eta = session.Eta(verify_s=20)
    est = eta.remaining_s(spec.plan(), 1)
    assert 20 + 0.7 * len(spec.plan()) < est < 20 + 60 * len(spec.plan())
    assert session.fmt_duration(3725) == "1h02m" and session.bar(5, 10, 10) == "[#####.....]"


def test_eta_learns_bandwidth_and_latency_separately():
    from plt_bench import session
    from .trials import conditions, trial
    eta = session.Eta(verify_s=0)
    c = conditions()
    # a latency-bound small page must not inflate the estimate of a bandwidth-bound large one
    eta.observe(trial(size=5000, plt=400.0, wall_s=0.9, cond=c))       # ideal 4 ms, PLT 400 ms
    eta.observe(trial(size=10**7, plt=8400.0, wall_s=8.9, cond=c))     # ideal 8 s, PLT 8.4 s
    f, latency, overhead = eta.model()
    assert f == pytest.approx(1.05) and overhead == pytest.approx(0.5)
    assert 8.0 * 1.05 < eta.trial_s(c, 10**7) < 8.0 * 1.05 + 1.0
    assert eta.trial_s(c, 5000) < 1.5


def test_options_are_named_as_typed_and_file_values_by_the_file():
    """Issue 26: an option's error is not prefixed with the preset's file (it was, sometimes twice);
    a file's is, with the file's key."""
    with pytest.raises(UsageError) as e:
        campaign.load("quick", {"bw": "fast"})
    assert str(e.value).startswith("--bw: 'fast' is not a rate") and "campaign file" not in str(e.value)
    with pytest.raises(UsageError) as e:
        campaign.load("quick", {"precision": "200%"})
    assert str(e.value).startswith("--precision: '200%' is over 50%"), e.value
    with pytest.raises(UsageError) as e:
        campaign.load("quick", {"runs": "1", "max_runs": "4"})
    assert str(e.value).startswith("--max-runs: only with --precision"), e.value


def test_conditions_are_kept_to_what_the_link_applies_and_labelled_exactly():
    """Issue 26: --rtt 10ms,10.0000001ms stored two RTTs under one label; --loss 99.9999999% was
    labelled (and applied by tc as) 100%. Values finer than the link applies are refused; the label
    shows the stored value exactly."""
    for args, fragment in [({"rtt": "10ms,10.0000001ms"}, "--rtt: '10.0000001ms' is finer than the link applies"),
                           ({"rtt": "25.001ms"}, "expected a multiple of 0.002ms, e.g. 25ms"),
                           ({"loss": "99.9999999%"}, "--loss: '99.9999999%' is finer than the link applies"),
                           ({"rtt": "40ms", "jitter": "0.0005ms"}, "--jitter: '0.0005ms' is finer")]:
        with pytest.raises(UsageError, match=fragment):
            campaign.load("quick", {"size": "5KB", **args})
    g = campaign.load("quick", {"size": "5KB", "rtt": "59999.998ms,0.002ms", "loss": "99.9999%,0.0001%"}).grid
    labels = [c.label for c in g.conditions]
    assert "100mbit rtt59999.998ms loss99.9999%" in labels and "100mbit rtt0.002ms loss0.0001%" in labels
    assert len(set(labels)) == len(labels) == 4
    assert campaign.load("quick", {"rtt": "112ms", "loss": "0.1%"}).grid.conditions[0].label == \
        "100mbit rtt112ms loss0.1%"  # labels of older stores' values are unchanged


def test_a_huge_grid_is_refused_before_a_plan_is_made():
    """Issue 26: a 2x10^9-trial grid died in plan() with MemoryError; 2x10^6 ran silently."""
    rates = ",".join(f"{i}mbit" for i in range(1, 101))
    with pytest.raises(UsageError, match="--bw, --runs, --size: 2,000,000 trials; plt-bench runs at most 1,000,000"):
        campaign.load("quick", {"bw": rates, "runs": "1000", "size": "5KB,6KB,7KB,8KB,9KB,10KB,11KB,12KB,13KB,14KB"})
    with pytest.raises(UsageError, match="more than 100,000 .* give --allow-large"):
        campaign.load("quick", {"bw": rates, "runs": "1000", "size": "5KB"})
    big = campaign.load("quick", {"bw": rates, "runs": "1000", "size": "5KB", "allow_large": True})
    assert big.trial_count == 200_000 and big.what == "quick with --bw, --runs, --size given"
    with pytest.raises(UsageError, match="conditions; at most 10,000"):
        campaign.load("quick", {"bw": rates, "rtt": ",".join(f"{i}ms" for i in range(1, 102))})
    assert campaign.load("quick").what == campaign.load("quick").description  # no option given: the file's words


def test_congestion_control_is_an_axis_interleaved_with_the_protocols():
    spec = campaign.load("quick", {"size": "5KB", "runs": "3", "proto": "h3,h2", "cc": "cubic,bbr", "rtt": "0"})
    plan = spec.plan()
    assert spec.grid.ccs == ("cubic", "bbr") and spec.cc == "cubic" and len(plan) == spec.trial_count == 3 * 2 * 2
    for run in range(3):  # each run holds every (protocol, cc) of the page once, in a seeded order
        assert sorted((x.proto, x.cc) for x in plan if x.run_index == run) == sorted(
            (p, c) for p in ("h3", "h2") for c in ("cubic", "bbr"))
    assert len({tuple((x.proto, x.cc) for x in plan if x.run_index == r) for r in range(3)}) > 1
    assert plan[0].cell.cc == plan[0].cc and spec.as_dict()["cc"] == ["cubic", "bbr"]
    # one cc keeps the definition (and so the hash) campaigns had
    assert campaign.load("quick", {"cc": "bbr"}).as_dict()["cc"] == "bbr"
    with pytest.raises(UsageError, match="--cc: cubic, bbr: several congestion controls need this machine's testbed"):
        campaign.load("quick", {"cc": "cubic,bbr", "server_machine": "192.0.2.1", "server_token_file": "/x", "iface": "eth0"})
    with pytest.raises(UsageError, match="--reference: 'h2' is not one protocol"):
        campaign.load("quick", {"reference": "h2"})
    assert campaign.load("quick", {"cc": "cubic,bbr", "compare": "cc", "reference": "bbr"}).reference == "bbr"
    with pytest.raises(UsageError, match="--reference: 'reno' is not one congestion control"):
        campaign.load("quick", {"cc": "cubic,bbr", "compare": "cc", "reference": "reno"})


def test_the_browser_is_an_axis_interleaved_with_the_protocols_and_ccs():
    """--browser chromium,firefox: every run holds each (protocol, cc, browser) once in a seeded order;
    one browser keeps the order and the hash campaigns had (Chromium alone is not written)."""
    base = {"size": "5KB", "runs": "3", "proto": "h3,h2", "rtt": "0"}
    spec = campaign.load("quick", {**base, "browser": "chromium,Firefox"})
    plan = spec.plan()
    assert spec.grid.browsers == ("chromium", "firefox") and spec.browser == "chromium"
    assert len(plan) == spec.trial_count == 3 * 2 * 2 and spec.as_dict()["browser"] == ["chromium", "firefox"]
    for run in range(3):
        assert sorted((x.proto, x.browser) for x in plan if x.run_index == run) == sorted(
            (p, b) for p in ("h3", "h2") for b in ("chromium", "firefox"))
    assert len({tuple((x.proto, x.browser) for x in plan if x.run_index == r) for r in range(3)}) > 1
    assert plan[0].cell.browser == plan[0].browser
    both = campaign.load("quick", {**base, "browser": "chromium,firefox", "cc": "cubic,bbr"})
    assert {(x.proto, x.cc, x.browser, x.server, x.budget) for x in both.plan()} == set(both.grid.variants()) and both.trial_count == 24
    one = campaign.load("quick", base)
    assert [(x.proto, x.browser) for x in one.plan()] == [(x.proto, "chromium") for x in one.plan()]
    assert "browser" not in one.as_dict() and campaign.load("quick", {**base, "browser": "chromium"}).spec_hash == \
        one.spec_hash
    assert campaign.load("quick", {**base, "browser": "firefox"}).as_dict()["browser"] == "firefox"
    assert spec.spec_hash != one.spec_hash
    assert campaign.load("quick", {**base, "browser": "chromium,firefox", "compare": "browser"}).compare == "browser"
    assert campaign.load("quick", {**base, "browser": "chromium,firefox", "compare": "browser",
                                   "reference": "Firefox"}).reference == "firefox"
    # two machines load in either (Firefox's names resolved by its own override: Firefox.one_address)
    both = campaign.load("quick", {"browser": "chromium,firefox", "server_machine": "192.0.2.1", "server_token_file": "/x",
                                   "iface": "eth0"})
    assert both.grid.browsers == ("chromium", "firefox")


def test_the_server_is_an_axis_interleaved_with_the_protocols():
    """--http-server caddy,quinn: every run holds each (protocol, server) once in a seeded order, each
    slot's cell names its server; one server keeps the order and the hash campaigns had (Caddy alone is
    not written); the report may compare the servers within each protocol."""
    base = {"size": "5KB", "runs": "3", "proto": "h3,h2", "rtt": "0"}
    spec = campaign.load("quick", {**base, "http_server": "caddy,Quinn"})
    plan = spec.plan()
    assert spec.grid.servers == ("caddy", "quinn") and spec.http_server == "caddy"
    assert len(plan) == spec.trial_count == 3 * 2 * 2 and spec.as_dict()["http_server"] == ["caddy", "quinn"]
    for run in range(3):
        assert sorted((x.proto, x.server) for x in plan if x.run_index == run) == sorted(
            (p, s) for p in ("h3", "h2") for s in ("caddy", "quinn"))
    assert len({tuple((x.proto, x.server) for x in plan if x.run_index == r) for r in range(3)}) > 1
    assert {x.cell.server for x in plan} == {"caddy", "quinn"} and all(x.cell.server == x.server for x in plan)
    assert spec.grid.variant_words("h3", "cubic", "chromium", "quinn") == "h3 quinn"
    one = campaign.load("quick", base)
    assert [(x.proto, x.server) for x in one.plan()] == [(x.proto, "caddy") for x in one.plan()]
    assert "http_server" not in one.as_dict() and campaign.load("quick", {**base, "http_server": "caddy"}).spec_hash == \
        one.spec_hash
    assert campaign.load("quick", {**base, "http_server": "quinn"}).as_dict()["http_server"] == "quinn"
    assert spec.spec_hash != one.spec_hash
    compared = campaign.load("quick", {**base, "http_server": "caddy,quinn", "compare": "server", "reference": "QUINN"})
    assert (compared.compare, compared.reference) == ("server", "quinn")
    # two machines serve with either (plt-bench serve --http-server caddy,quinn; the server machine says
    # which it runs, and the testbed refuses one it lacks when it meets it: remote.missing_servers)
    both = campaign.load("quick", {"http_server": "caddy,quinn", "server_machine": "192.0.2.1", "server_token_file": "/x",
                                   "iface": "eth0"})
    assert both.grid.servers == ("caddy", "quinn")


def test_the_routes_carry_the_congestion_control_and_change_between_trials():
    from plt_bench.topology import Plan
    p = Plan(7, "bbr")
    made = [argv for _, argv in p.create_commands() if argv[:3] == ["ip", "route", "add"]]
    assert len(made) == 4 and all(argv[-2:] == ["congctl", "bbr"] for argv in made)
    changed = p.route_commands("cubic")
    assert [argv[:3] for _, argv in changed] == [["ip", "route", "change"]] * 4
    assert {ns for ns, _ in changed} == {p.client_ns, p.server_ns} and all(a[-1] == "cubic" for _, a in changed)


def test_visits_multiply_the_pages_and_the_metric_leaves_the_campaign_as_it_was():
    from plt_bench import campaign
    s = campaign.load("quick", {"size": "5KB,4o:20x5KB,bulk10s,20x5KB@repeat", "visit": "first,repeat-warm"})
    assert [p.label for p in s.grid.pages] == ["5KB", "5KB@repeat-warm", "4o:20x5KB", "4o:20x5KB@repeat-warm",
                                               "bulk10s", "20x5KB@repeat"]  # a bulk page and a named visit as given
    assert s.trial_count == 6 * 2 * 5 * 1
    plain = campaign.load("quick")
    by_lcp = campaign.load("quick", {"metric": "lcp"})
    assert by_lcp.metric == "lcp" and by_lcp.as_dict()["metric"] == "lcp" and "metric" not in plain.as_dict()
    assert by_lcp.spec_hash == plain.spec_hash  # what the report compares by: the same trials, the same campaign
    assert campaign.load("repeat").grid.pages[1].visit == "repeat"
    assert [p.label for p in campaign.load("origins").grid.pages] == ["60x5KB", "4o:60x5KB", "8o:60x5KB"]


def test_a_repeated_value_counts_once_in_every_list_and_an_empty_item_is_refused():
    """Issue 36: --visit first,first doubled the runs per cell while --size and --cc dropped repeats;
    --proto h3,,h1 was taken. One rule for every list: a repeat counts once (the first place kept),
    an empty item is refused by the option's name."""
    base = {"size": "5KB", "proto": "h3"}
    for key, value, once in (("visit", "first,first", "first"), ("visit", "first,repeat,first", "first,repeat"),
                             ("proto", "h3,h3,quic", "h3"), ("size", "5KB,5000B", "5KB"), ("cc", "cubic,CUBIC", "cubic"),
                             ("bw", "10mbit,10Mbit", "10mbit"), ("rtt", "50ms,50ms", "50ms"), ("loss", "1%,1%", "1%")):
        spec, want = campaign.load("quick", {**base, key: value}), campaign.load("quick", {**base, key: once})
        assert spec.trial_count == len(spec.plan()) == want.trial_count == len(want.plan()), (key, value)
    for key, value in (("proto", "h3,,h1"), ("proto", "h3,"), ("size", "5KB,,500KB"), ("visit", "first,"),
                       ("cc", ",cubic"), ("bw", "10mbit,,20mbit"), ("capture", "cpu,,pcap")):
        with pytest.raises(UsageError, match=f"--{key.replace('_', '-')}: .* has an empty item"):
            campaign.load("quick", {key: value})


def test_the_reference_takes_any_case_as_the_list_it_names_does():
    """Issue 36: `run --proto H1` was taken and `report --reference H1` refused: one rule for case."""
    from plt_bench.analysis import stats
    spec = campaign.load("quick", {"proto": "H3,H1", "reference": "H1"})
    assert spec.grid.protos == ("h3", "h1") and spec.reference == "h1"
    assert stats.reference_for(["h3", "h1"], "H1") == "h1" and stats.reference_for(["h3", "h1"], "QUIC") == "h3"
    assert campaign.load("quick", {"cc": "CUBIC,BBR", "compare": "cc", "reference": "BBR"}).reference == "bbr"


def test_the_cpu_budget_is_an_axis_and_no_budget_keeps_the_hash_campaigns_had():
    """--cpu 1,0.25 (issue 45): each run holds every (protocol, budget) once in a seeded order, each
    slot's cell carries its fraction of a core and --cores; without --cpu nothing is written (older
    campaigns resume); a budget the kernel cannot enforce, and --cores alone, are refused by name."""
    base = {"size": "5KB", "runs": "2", "proto": "h3,h2", "rtt": "0"}
    spec = campaign.load("quick", {**base, "cpu": "1,0.25,1"})
    assert spec.grid.budgets == ("cpu1", "cpu0.25") and spec.as_dict()["cpu"] == ["cpu1", "cpu0.25"]
    plan = spec.plan()
    assert len(plan) == spec.trial_count == 2 * 2 * 2
    assert {(x.proto, x.budget) for x in plan} == {(p, b) for p in ("h3", "h2") for b in ("cpu1", "cpu0.25")}
    assert {(x.cell.cpu, x.cell.cores) for x in plan} == {(1.0, 1), (0.25, 1)}
    assert spec.grid.variant_words("h3", "cubic", "chromium", "caddy", "cpu0.25") == "h3 cpu0.25"
    one = campaign.load("quick", base)
    assert "cpu" not in one.as_dict() and {x.cell.cpu for x in one.plan()} == {None}
    assert campaign.load("quick", {**base, "cpu": "full"}).spec_hash == one.spec_hash
    assert campaign.load("quick", {**base, "cpu": "0.5", "cores": "2"}).as_dict()["cores"] == 2
    for bad, why in (("0", "in \\(0, 1\\]"), ("1.5", "in \\(0, 1\\]"), ("x", "not a number"),
                     ("0.0001", "needs a period over the kernel"), ("0.0_5", "not a number"), ("1e-1", "not a number"),
                     ("nan", "not a number")):
        with pytest.raises(UsageError, match=f"--cpu: '{bad}': .*{why}"):
            campaign.load("quick", {**base, "cpu": bad})
    # issue 59, item 10: a budget finer than it is set is refused naming the nearest, as --rtt's is
    with pytest.raises(UsageError, match=r"--cpu: '0.123456789012' is finer than a budget is set .*nearest 0.123\)"):
        campaign.load("quick", {**base, "cpu": "0.123456789012"})
    assert campaign.load("quick", {**base, "cpu": "0.125"}).grid.budgets == ("cpu0.125",)
    # issue 59, item 8: a device given as a budget says where it goes
    with pytest.raises(UsageError, match="--cpu: 'low-end-phone' is a device; give it as --device low-end-phone"):
        campaign.load("quick", {**base, "cpu": "low-end-phone"})
    with pytest.raises(UsageError, match="--cores = 2 without a CPU budget"):
        campaign.load("quick", {**base, "cores": "2"})
    with pytest.raises(UsageError, match="--cores = 64; expected a whole number from 1 to"):
        campaign.load("quick", {**base, "cpu": "0.5", "cores": "64"})


def test_a_device_is_a_value_of_the_budget_axis_beside_the_cpu_budgets():
    """--device (issue 45): each device is a value of the budget axis (compared with --compare cpu), its
    cell one core's worth with no fraction of its own (each host calibrates it); --cpu beside it adds
    its budgets; unknown names are refused by name with the known ones; the definition holds both."""
    base = {"size": "5KB", "runs": "2", "proto": "h3,h2", "rtt": "0"}
    spec = campaign.load("quick", {**base, "device": "low-end-phone"})
    assert spec.grid.budgets == ("low-end-phone",) and spec.as_dict()["device"] == ["low-end-phone"]
    assert "cpu" not in spec.as_dict()
    assert {(x.cell.device, x.cell.cpu, x.cell.cores, x.budget) for x in spec.plan()} == {
        ("low-end-phone", None, 1, "low-end-phone")}
    both = campaign.load("quick", {**base, "cpu": "1", "device": "mid-phone,low-end-phone", "cores": "2",
                                   "compare": "cpu", "reference": "1"})
    assert both.grid.budgets == ("cpu1", "mid-phone", "low-end-phone") and both.compare == "budget"
    assert both.reference == "cpu1" and both.as_dict()["cpu"] == ["cpu1"]
    assert {(x.budget, x.cores) for x in both.plan()} == {("cpu1", 2), ("mid-phone", 1), ("low-end-phone", 1)}
    assert campaign.load("quick", {**base, "cpu": "full", "device": "laptop"}).grid.budgets == ("full", "laptop")
    with pytest.raises(UsageError, match="--device: 'iphone' is no device; expected device names, comma-separated, "
                                         "of low-end-phone, mid-phone, laptop"):
        campaign.load("quick", {**base, "device": "iphone"})


def test_a_campaign_file_names_a_device_as_the_option_does(tmp_path):
    """Issue 59, item 8: 'device = "low-end-phone"' in a campaign file was an unknown key; every option
    reads the same in every front end, so the file's device is the option's, the same campaign."""
    f = tmp_path / "phone.toml"
    f.write_text('name = "phone"\nsizes = ["5KB"]\nprotos = ["h3", "h2"]\nruns = 2\ndevice = "low-end-phone"\n'
                 '[link]\nbw = "10mbit"\nrtt = "0ms"\n')
    spec = campaign.load(str(f), {})
    assert spec.grid.budgets == ("low-end-phone",) and spec.as_dict()["device"] == ["low-end-phone"]
    f.write_text(f.read_text().replace('device = "low-end-phone"', 'device = ["mid-phone", "laptop"]'))
    assert campaign.load(str(f), {}).grid.budgets == ("mid-phone", "laptop")
    f.write_text(f.read_text().replace('device = ["mid-phone", "laptop"]', 'device = "iphone"'))
    with pytest.raises(UsageError, match="device: 'iphone' is no device"):
        campaign.load(str(f), {})


def test_the_bottleneck_preset_is_a_real_replayed_page_and_a_multi_object_one_under_each_discipline(monkeypatch):
    """Issue 46's page-load experiment: h3 vs h2 on real:toolbelt (its recording) and 4o:20x5KB, at
    20 Mbit/s and 50 ms, droptail/CoDel/FQ-CoDel x 0/1/4 competing CUBIC flows; without the recording
    the preset says how it is made (a run records it first)."""
    from plt_bench import pages
    from plt_bench.pages import real as realpages

    from .test_pages import fake_recordings
    monkeypatch.setattr(pages.archive, "archive_exists", lambda name, sites=None: False)
    with pytest.raises(realpages.NotRecorded):
        campaign.load("bottleneck")
    monkeypatch.setattr(pages.archive, "archive_exists", lambda name, sites=None: True)
    fake_recordings(monkeypatch, 600_000, 12, 20_000)
    b = campaign.load("bottleneck")
    assert [p.replay for p in b.grid.pages if p.archived] == ["real-toolbelt"]
    assert [(p.objects, p.origins) for p in b.grid.pages if not p.archived] == [(20, 4)]
    assert {(c.aqm and c.aqm.text, c.cross) for c in b.grid.conditions} == {
        (a, x) for a in ("droptail", "codel", "fq_codel") for x in (None, "1xtcp-cubic", "4xtcp-cubic")}
    assert {(c.rate_down_bps, c.rtt_ms) for c in b.grid.conditions} == {(20 * 10**6, 50)} and b.grid.protos == ("h3", "h2")


def test_the_presets_list_counts_a_preset_whose_real_page_its_first_run_records(monkeypatch, capsys, tmp_path):
    from plt_bench import cli, pages, signals
    monkeypatch.setattr(signals, "install", lambda: None)  # the test process's own signal handlers stay
    monkeypatch.setattr(pages.archive, "archive_exists", lambda name, sites=None: False)
    assert cli.main(["campaigns", "--results", str(tmp_path / "none.sqlite")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.split()[:1] == ["bottleneck"])
    assert "180 trials" in line and line.endswith("(its first run records real:toolbelt)"), line


def test_a_served_folder_is_named_folder_and_its_name_before_still_reads_and_resumes(tmp_path, open_tmp_path):
    """Folders served as they are: --folder and the campaign key folder (plt-bench serve is the second
    machine's command, and --serve beside it named two things); --serve and the key serve, their names
    before, are still taken, and a campaign's definition keeps its hash, so one begun before resumes."""
    from plt_bench import cli, options
    from plt_bench.pages import page_url
    (open_tmp_path / "d").mkdir()
    docs = "url:" + page_url("docs.pkg.test", "/")
    base = f"name = 'x'\nsizes = ['{docs}']\nruns = 1\n"
    new = campaign.load(_write(tmp_path, base + f"folder = ['docs.pkg.test={open_tmp_path / 'd'}']\n"))
    (tmp_path / "old").mkdir()
    old = campaign.load(_write(tmp_path / "old", base + f"serve = ['docs.pkg.test={open_tmp_path / 'd'}']\n"))
    assert new.folders == old.folders == (("docs.pkg.test", str(open_tmp_path / "d")),)
    assert new.spec_hash == old.spec_hash and new.as_dict()["serve"] == [f"docs.pkg.test={open_tmp_path / 'd'}"]
    (tmp_path / "both").mkdir()
    with pytest.raises(UsageError, match="folder and serve: the same setting twice"):
        campaign.load(_write(tmp_path / "both", base + "serve = ['a.test=/x']\nfolder = ['a.test=/x']\n"))
    parser = cli.build_parser()
    for flag in ("--folder", "--serve"):  # run's, record's and serve's take both, as one option
        assert parser.parse_args(["run", flag, "a.test=/x"]).folder == "a.test=/x"
        assert parser.parse_args(["record", page_url("a.test"), "--name", "n", flag, "a.test=/x"]).folder == ["a.test=/x"]
        assert parser.parse_args(["serve", "--addr", "192.0.2.1", flag, "a.test=/x"]).folder == ["a.test=/x"]
    assert options.option("folder").aliases == ("--serve",)


def test_the_server_machine_is_named_so_and_its_name_before_still_reads_and_resumes(tmp_path):
    """The second machine's address: --server-machine and the campaign key server_machine; --server and
    the key server (their names before 2026-11-28) are still taken, and a campaign's identity is what it
    was, so a two-machine campaign begun before resumes after."""
    base = "name = 'x'\nsizes = ['5KB']\nruns = 1\niface = 'eth0'\nserver_token_file = '/x'\n"
    new = campaign.load(_write(tmp_path, base + "server_machine = '192.0.2.1'\n"))
    (tmp_path / "old").mkdir()
    old = campaign.load(_write(tmp_path / "old", base + "server = '192.0.2.1'\n"))
    assert new.server_machine == old.server_machine == "192.0.2.1"
    assert new.as_dict()["server_machine"] == "192.0.2.1" and "server" not in new.as_dict()
    assert new.spec_hash == old.spec_hash
    # the identity a campaign of the old name had: its definition with 'server' hashed as the spec was
    import hashlib
    import json
    ident = {**new.as_dict(), "protos": ["tcp" if p == "h1" else "quic" if p == "h3" else p for p in new.grid.protos]}
    ident.pop("metric", None)
    ident["server"] = ident.pop("server_machine")
    assert new.spec_hash == hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    (tmp_path / "both").mkdir()
    with pytest.raises(UsageError, match="server_machine and server: the same setting twice"):
        campaign.load(_write(tmp_path / "both", base + "server = '192.0.2.1'\nserver_machine = '192.0.2.2'\n"))
