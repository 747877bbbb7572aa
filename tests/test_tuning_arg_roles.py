"""Tuning reads a step kernel's argument roles, not its buffer names."""
from __future__ import annotations

import numpy as np
import pytest

from schedules.fusion.group_codegen import KernelParams
from schedules.fusion.arg_roles import ArgRole
from tvm_ext.tuning.spaces import cg_tasks
from tvm_ext.tuning.tasks import make_task
from tvm_ext.workloads import lap2d


def _check_parts_and_workspaces(task):
    roles, args = task.arg_roles, task.args
    assert len(roles) == len(args) == len(task.mod["main"].params)
    parts = [a for r, a in zip(roles, args) if r is ArgRole.PARTS]
    for r, a in zip(roles, args):
        if r is ArgRole.WORKSPACE:
            assert a.shape[0] == parts[0].size
    return parts


@pytest.mark.parametrize("prefixes", [("g_", "w_"), ("env_", "scratch_")])
def test_cg_tuning_follows_roles_whatever_the_buffer_names(monkeypatch, prefixes):
    monkeypatch.setattr(KernelParams, "tensor_prefix", prefixes[0])
    monkeypatch.setattr(KernelParams, "workspace_prefix", prefixes[1])
    tasks = cg_tasks(lap2d(8), 2)
    names = {p.name for t in tasks for p in t.mod["main"].params}
    assert any(n.startswith(prefixes[1]) for n in names)
    sizes = {}
    for t in tasks:
        (parts,) = _check_parts_and_workspaces(t)
        assert parts[0] == 0 and parts[-1] == 64  # bounds cover the 8x8 grid's rows
        sizes.setdefault(t.group, set()).add(parts.size)
    assert all(len(s) > 1 for s in sizes.values())  # the part count did change per setting
    # the tuned (here: untuned, other part count) kernel writes what the library's kernel writes
    import tvm

    cg = make_task("cg", matrix=lap2d(8), n=2, name="lap8")
    task = next(t for t in tasks if t.group == "X1+R1+Gamma1" and t.knobs["parts_per_thread"] == 16)
    assert ArgRole.TENSOR in task.arg_roles
    from tvm_ext.target import resolve_target

    err = cg.check(task, tvm.compile(task.mod, target=resolve_target(None)))
    assert err < 1e-12


def test_a_role_count_mismatch_is_a_clear_error():
    from tvm_ext.errors import ScheduleError
    from tvm_ext.tuning.spaces import _replace_parts

    with pytest.raises(ScheduleError, match="roles"):
        _replace_parts((ArgRole.PARTS,), [np.zeros(3), np.zeros(3)], 2, 4, None)
