"""Fixtures of the unit tests."""
import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def open_tmp_path():
    """A new folder every user may read and pass into (mode 0755, under /tmp): pytest's tmp_path is
    inside a folder only its owner may enter, which a served folder's check refuses (a folder served
    as it is holds only what every user may read: recorder.folder_refused)."""
    path = Path(tempfile.mkdtemp(prefix="plt-bench-unit-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
