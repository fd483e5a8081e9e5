"""The typed records: the trial's table is made from the record, the worker's answer has one shape."""
import ast
import dataclasses
import typing

import pytest

from plt_bench import records, store
from plt_bench.conditions import Conditions

from .trials import conditions, trial


def test_every_field_is_documented_and_is_a_column_the_conditions_whole():
    names = [c[0] for c in records.columns()]
    for f in dataclasses.fields(records.Trial):
        assert f.metadata.get("doc"), f"{f.name} has no documentation"
    assert {f.name for f in dataclasses.fields(Conditions)} - {"name"} <= set(names) and "conditions_name" in names
    assert "trial_id" not in names and len(names) == len(set(names))
    assert all(f"  {n} " in store.trials_table() for n in names)


def test_a_record_goes_through_a_row_and_comes_back_equal():
    cond = conditions("Cable", 5 * 10**6, rtt_ms=28.0, jitter_ms=2.0, reorder=False, queue_pkts=100)
    t = trial(cond=cond, warmup=True, attempt=2)
    back = records.Trial.from_row({**t.row(), "id": 7})
    assert back == t and back.trial_id == 7 and back.warmup is True and back.conditions.reorder is False
    assert t.row()["conditions"] == cond.label == "Cable (5mbit rtt28ms jitter2ms-inorder q100)"


def test_only_ok_timed_non_warmup_trials_count():
    assert trial().counts
    assert not trial(warmup=True).counts and not trial(status="failed").counts


def test_the_worker_answers_in_the_shape_the_runner_reads():
    """Every key the browser worker puts in its answer is a key of records.WorkerAnswer (read from
    the worker's source), and an answer with another key is refused."""
    import plt_bench.browsers.worker as w
    tree = ast.parse(open(w.__file__).read())
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in ("out", "ans") \
                and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("out", "ans") for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    shape = set(typing.get_type_hints(records.WorkerAnswer))
    assert keys and keys <= shape, keys - shape
    assert records.check_answer({"nav": None, "error": "x"})
    with pytest.raises(ValueError, match="unknown key"):
        records.check_answer({"nav": None, "navigation": {}})
