"""The visitor's device (issue 45): a CPU budget for the whole browser (budget: the arithmetic;
cgroup: the kernel's groups, v1 and v2), named device profiles and their calibration per host."""
