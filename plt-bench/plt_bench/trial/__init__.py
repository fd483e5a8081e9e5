"""What every trial shares, whatever its page's kind (plt_bench.pages) and its browser (plt_bench.browsers):

    run        one trial on a testbed: ready, load, evidence, judgement, store; conditions applied and verified
    evidence   what a load left (Evidence) and its record (make_trial): the kind's judgement joined to the shared one
    judge      the shared judgement: timings, paint metrics, connections, what carried a discovery trial

The browser worker and its pipe are the browser seam's (browsers.worker, browsers.pipe).
"""
