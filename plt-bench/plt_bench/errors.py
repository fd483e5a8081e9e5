"""Exceptions raised by the library. Only the CLI and the pytest plugin turn them into messages and exit codes."""


class PltBenchError(Exception):
    """Base class of every error the testbed raises on purpose."""


class UsageError(PltBenchError):
    """Bad input from the user: an option, a value, a file. The CLI exits 2."""


class EnvironmentProblem(PltBenchError):
    """The machine lacks something the testbed needs (root, a binary, a kernel feature)."""


class TopologyError(PltBenchError):
    """Creating or removing namespaces, links or addresses failed."""


class LinkError(PltBenchError):
    """The link could not be configured, or reading it back showed it is not what was asked."""


class ServerError(PltBenchError):
    """Caddy could not be configured or started, or stopped answering."""


class BrowserError(PltBenchError):
    """The browser worker could not be started or stopped answering (not a failed trial: those are records)."""


class CaptureError(PltBenchError):
    """A capture (tcpdump, qlog, key log) could not be started or finished."""


class TestbedBroken(PltBenchError):
    """A process the testbed needs (Caddy, the link emulator, the browser worker) has died, or a trial's
    process would not end: no further trial can be trusted. The run stops (exit 1); the campaign
    keeps its finished trials and resumes when run again."""


class StoreError(PltBenchError):
    """The results store could not be written (a full disk, an I/O error); what was stored before stays."""
