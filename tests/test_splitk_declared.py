"""The declared GPU's plan of the split-K rewrite on a stand-in box (issue 29): the environment that makes the
wrapper plan, and Triton compile, as the deployment's GPU would, for each box it may run on, and the command
the catalog builds for the kernel tools. (The split-K step's use of it is on the branch
issue29-splitk-declared-plan until the shipped H200 example is re-recorded with it.)"""

from __future__ import annotations

import pytest

from agent.box.catalog import CATALOG
from tools.kernels.splitk import declared


def test_each_box_gets_the_environment_of_the_declared_plan():
    assert declared.plan_env(120, None) == {declared.PLAN_ARCH_ENV: "120"}  # a CPU: the interpreter runs the family
    # a Hopper stand-in: the dots lowered to mma.sync, as sm_120 has them
    assert declared.plan_env(120, 90) == {declared.PLAN_ARCH_ENV: "120", declared.WGMMA_OFF_ENV: "1"}
    assert declared.plan_env(120, 100) == {declared.PLAN_ARCH_ENV: "120"}  # another GPU without wgmma
    assert declared.plan_env(120, 120) == {} and declared.plan_env(None, 90) == {}  # the declared GPU itself
    with pytest.raises(ValueError):  # Hopper's kernels cannot be planned on another GPU
        declared.plan_env(90, 120)


def test_the_kernel_tools_are_told_the_plan_on_their_command_line():
    check = CATALOG["kernel.splitk_check"].command("python3", {"batch": 2, "topk": 128, "heads": 64, "device": "cuda",
                                                              "extra_topk": 512, "sink": True, "plan_arch": 120})
    assert check[:3] == ["python3", "-m", "tools.kernels.splitk"] and check[-2:] == ["--plan-arch", "120"]
    bench = CATALOG["kernel.splitk_bench"].command("python3", {"batch": 2, "topk": 128, "heads": 64})
    assert "--plan-arch" not in bench
