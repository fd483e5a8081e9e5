import random, sys
sys.path[:0] = ["/tmp/wt14/plt-bench", "/tmp/wt14"]
from plt_bench import store as st
from plt_bench.pages import Page, parse_page
from tests.unit.trials import trial, conditions
rng = random.Random(14)
path = sys.argv[1]
with st.Store(path) as s:
    cid = s.new_campaign("v14-paint", "2026-11-24T16:00:00Z", {"protos": ["h3", "h2", "h1"]}, {"link_backend": "linkem"})
    seq = 0
    for rate in (10**7, 10**8):
        cond = conditions(None, rate, rtt_ms=50.0)
        for visit in ("first", "repeat"):
            page = parse_page("4o:20x5KB" + ("" if visit == "first" else "@repeat"), "--size")
            for run in range(4):
                for proto, base in (("h3", 400), ("h2", 520), ("h1", 700)):
                    plt = base * (1.0 if rate == 10**8 else 1.6) * (0.8 if visit == "repeat" and proto == "h3" else 1.0) + rng.randint(0, 30)
                    t = trial(cid, seq, proto, plt=float(plt), cond=cond, page=page, run_index=run,
                              fcp_ms=float(round(plt * 0.5)), lcp_ms=float(round(plt * 0.6)), lcp_element="img#hero",
                              origins=4, visit=visit, first_plt_ms=float(plt + 100) if visit == "repeat" else None,
                              zero_rtt=4 if visit == "repeat" and proto == "h3" else (0 if visit == "repeat" else None))
                    s.add_trial(t)
                    seq += 1
    s.finish_campaign(cid, "finished", "2026-11-24T16:10:00Z")
print(seq)
