"""Each value a user types is read once, where the campaign is built, and travels as what it was read
into (issue 60): --aqm becomes the link's Aqm record on the conditions (it was parsed 7 times on its
way: by the grid, the label, linkem's argv and its check, netem's commands and read-back, the link
check, the backend's choice), --cpu and --device a Budget on the grid's budget axis (decoded three
times, then a 5-tuple). These tests build a campaign, then make every later parse fail, and walk
each value to where it takes effect."""
import pytest

from plt_bench import campaign, conditions
from plt_bench.conditions import Budget
from plt_bench.device.calibrate import Calibration
from plt_bench.device.visitor import Visitor
from plt_bench.link import Capabilities, aqm, commands, linkem, resolve, verify
from plt_bench.link.netem import bottleneck_counters
from plt_bench.topology import Plan


def _refuse(*a, **k):
    raise AssertionError("a value was read again on its way")


def test_aqm_is_parsed_once_where_the_campaign_is_built_and_never_on_its_way(monkeypatch, tmp_path):
    spec = campaign.load("quick", {"bw": "20mbit", "rtt": "50ms", "size": "5KB", "aqm": "codel:target=10ms,fq_codel,pie",
                                   "ecn": "true", "proto": "h2"})
    monkeypatch.setattr(aqm, "parse", _refuse)
    plan = Plan(0)
    for cond in spec.grid.conditions:
        assert isinstance(cond.aqm, aqm.Aqm) and cond.label.endswith("+ecn")
        argv = linkem.linkem_argv("linkem", cond, tmp_path / "stats.json")
        assert f"aqm={cond.aqm.name}" in " ".join(argv)
        if aqm.kernel_refusal(cond.aqm) is None:  # the netem backend's commands and what it reads back
            leaf = commands.aqm_leaf(cond.aqm, cond.ecn, cond.queue_for(cond.rate_down_bps))
            assert leaf[0] == cond.aqm.name and leaf[-1] == "ecn"
        assert bottleneck_counters(cond.aqm, {"sent_pkts": 3})["aqm"] == cond.aqm.name
        assert resolve("embedded", "auto", [cond], Capabilities(netem=False)).backend == "linkem"
        claim = verify.check_aqm(cond, cond.rate_down_bps, 1.0, [], [])
        assert claim is not None
        assert cond.as_dict()["aqm"] == cond.aqm.text  # what a store, a definition and the control channel hold
    assert plan.prefix


def test_cpu_and_device_are_read_once_into_the_budget_axis_and_reach_the_visitor_as_read(monkeypatch):
    spec = campaign.load("quick", {"size": "5KB", "proto": "h2", "cpu": "full,0.5,0.25", "device": "low-end-phone",
                                   "cores": "1"})
    assert spec.grid.budgets == ("full", "cpu0.5", "cpu0.25", "low-end-phone")
    assert all(isinstance(b, Budget) for b in spec.grid.budgets)
    monkeypatch.setattr(conditions, "budget_of", _refuse)
    monkeypatch.setattr(conditions, "device_of", _refuse)
    monkeypatch.setattr(conditions, "budget_label", _refuse)  # no Budget made anew from a label
    calibration = Calibration("low-end-phone", 264.0, 1000.0, 0.3, 265.0, "chromium")
    seen = {}
    for slot in spec.plan():
        visitor = Visitor.of_cell(slot.cell, {"low-end-phone": calibration})
        seen[str(slot.budget)] = (visitor.budget_cores, visitor.cores, visitor.calibration is not None)
    assert seen == {"full": (None, 1, False), "cpu0.5": (0.5, 1, False), "cpu0.25": (0.25, 1, False),
                    "low-end-phone": (0.3, 1, True)}
    # a stored trial's budget is made from its fields, not read from its label (campaign.Slot.of)
    monkeypatch.undo()
    monkeypatch.setattr(conditions, "budget_of", _refuse)
    monkeypatch.setattr(conditions, "device_of", _refuse)
    from .trials import trial
    t = trial(cpu_budget=0.25)
    assert campaign.Slot.of(t).budget.cpu == 0.25 and campaign.Slot.of(t).budget == "cpu0.25"


def test_a_budget_is_its_label_and_a_device_has_no_share_beside_it():
    import pickle
    assert Budget() == "full" and Budget(1.0) == "cpu1" and Budget(device="laptop") == "laptop"
    assert hash(Budget(0.25)) == hash("cpu0.25") and pickle.loads(pickle.dumps(Budget(0.25))).cpu == 0.25
    with pytest.raises(ValueError, match="a device"):
        Budget(0.5, "laptop")
