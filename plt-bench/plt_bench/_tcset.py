"""Run tcconfig's tcset without its lsmod check.

tcset asks `lsmod` whether sch_netem is loaded; on kernels whose modules are built in there is
no /proc/modules, lsmod fails and tcset aborts before doing anything. plt-bench probes netem
itself (link.netem_available) and reads the qdisc state back after every tcset, so the check
adds nothing. Usage: python -m plt_bench._tcset DEVICE [tcset options...]
"""

import sys

import tcconfig.tcset as tcset

tcset.verify_netem_module = lambda: None

if __name__ == "__main__":
    sys.exit(tcset.main())
