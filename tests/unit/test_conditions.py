import pytest

from plt_bench import conditions as c
from plt_bench.errors import UsageError


def test_grid_from_user_strings():
    g = c.make_grid("both", "10mbit,100mbit", "5KB,10MB", "3")
    assert g.protos == ("quic", "tcp")
    assert g.sizes == (5000, 10**7)
    assert [x.rate_down_bps for x in g.conditions] == [10**7, 10**8]
    assert all(x.rate_up_bps == x.rate_down_bps for x in g.conditions)
    assert len(g.cells()) == 8 and g.runs == 3


def test_duplicates_collapse_and_both_expands():
    g = c.make_grid("quic,both,tcp", "10mbit,10Mbps", "5KB,5000B", 1)
    assert g.protos == ("quic", "tcp") and g.sizes == (5000,) and len(g.conditions) == 1


def test_asymmetric_and_unshaped():
    g = c.make_grid("tcp", "100mbit", "5KB", 1, up_rates="10mbit")
    assert (g.conditions[0].rate_down_bps, g.conditions[0].rate_up_bps) == (10**8, 10**7)
    assert g.conditions[0].label == "100mbit/10mbit"
    u = c.make_grid("tcp", "unshaped", "5KB", 1)
    assert u.conditions[0].rate_down_bps is None and u.conditions[0].label == "unshaped"
    with pytest.raises(UsageError, match="--up-bw"):
        c.make_grid("tcp", "unshaped", "5KB", 1, up_rates="10mbit")


@pytest.mark.parametrize("kw,option", [
    (dict(protos="udp"), "--proto"), (dict(protos=""), "--proto"), (dict(rates="fast"), "--bw"),
    (dict(sizes="5XB"), "--size"), (dict(sizes="10B"), "--size"), (dict(sizes="3GB"), "--size"),
    (dict(runs="0"), "--runs"), (dict(runs="two"), "--runs"), (dict(up_rates="1mbit,2mbit"), "--up-bw"),
])
def test_bad_grid_input_names_the_option(kw, option):
    args = dict(protos="both", rates="10mbit", sizes="5KB", runs="1")
    args.update(kw)
    with pytest.raises(UsageError) as e:
        c.make_grid(**args)
    assert str(e.value).startswith(option)


def test_delay_jitter_loss_are_refused_not_ignored():
    c.reject_unsupported(None, None, None)
    for kw, opt in ((dict(rtt="50ms", jitter=None, loss=None), "--rtt"),
                    (dict(rtt=None, jitter="1ms", loss=None), "--jitter"),
                    (dict(rtt=None, jitter=None, loss="1%"), "--loss")):
        with pytest.raises(UsageError, match=opt):
            c.reject_unsupported(**kw)


def test_congestion_control_choice():
    assert c.parse_cc("BBR") == "bbr"
    with pytest.raises(UsageError, match="--cc"):
        c.parse_cc("vegas")


def test_ideal_seconds():
    assert c.ideal_seconds(10**7, 10**7) == 8.0
    assert c.ideal_seconds(5000, None) is None
