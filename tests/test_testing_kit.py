"""convalgos.testing on algorithms written as a user would (``kit_algorithms.py``): each planted bug is caught
and shrunk to a small layer that has the bug's feature and little else; the correct one passes."""
import pytest

import convalgos
import kit_algorithms as user
from convalgos import ConvParams
from convalgos.testing import WORKSPACE_ALLOWANCE, CheckError, CheckFailure, check_algorithm, check_layer


def plain(p: ConvParams) -> bool:
    """One image, one group, stride 1: the parts of a layer a shrunk counterexample should not need."""
    return p.N == 1 and p.groups == 1 and p.stride == (1, 1)


def one_channel(p: ConvParams) -> bool:
    return p.C == p.K == 1


def asymmetric(p: ConvParams) -> bool:
    return any(top != bottom for top, bottom in p.padding)


def padded_bytes(p: ConvParams) -> int:
    return p.N * p.C * p.padded_hw[0] * p.padded_hw[1] * p.itemsize


PLANTED = {   # algorithm -> (the check that must fail, what its smallest failing layer must look like)
    user.IgnoresDilation: ("agreement", lambda p: p.dilation != (1, 1) and p.R * p.S == 2 and plain(p)
                           and one_channel(p) and p.padding == ((0, 0), (0, 0))),
    user.NarrowIgnoresDilation: ("agreement", lambda p: p.dilation != (1, 1) and (p.R, p.S) == (3, 3)
                                 and plain(p) and one_channel(p)),
    user.PaddingOffByOne: ("agreement", lambda p: asymmetric(p) and p.R == p.S == 1 and plain(p)
                           and one_channel(p)),
    user.WrongGroups: ("agreement", lambda p: p.groups == 2 and p.C == p.K == 2 and p.R == p.S == 1
                       and p.N == 1 and p.stride == (1, 1)),
    user.UnwrittenLastColumn: ("written", lambda p: plain(p) and one_channel(p) and p.out_hw == (1, 1)),
    user.FalselyDeterministic: ("deterministic", lambda p: 3 <= p.R * p.S <= 4 and plain(p) and one_channel(p)),
    user.UnderDeclaredWorkspace: ("workspace", lambda p: WORKSPACE_ALLOWANCE / 2 < padded_bytes(p)
                                  <= 4 * WORKSPACE_ALLOWANCE),
    user.RaisesOnGroups: ("supports", lambda p: p.groups == 2 and p.C == p.K == 2 and p.R == p.S == 1),
    user.SilentRefusal: ("supports", lambda p: p.stride != (1, 1)),
}


@pytest.mark.parametrize("algorithm", list(PLANTED), ids=lambda cls: cls.name)
def test_each_planted_bug_is_caught_with_a_small_layer(algorithm):
    check, looks_right = PLANTED[algorithm]
    with pytest.raises(CheckFailure) as caught:
        check_algorithm(algorithm(), passes=["forward"], max_examples=60, seed=0)
    failure = next(f for f in caught.value.failures if f.check == check)
    assert looks_right(failure.layer), failure.describe()
    assert f"FAILED forward {check}" in str(caught.value) and str(failure.layer) in str(caught.value)
    if check != "deterministic":                      # a nondeterministic bug may pass one more run
        with pytest.raises(CheckError, match=rf"^\[{check}\]"):
            exec(failure.call, {"convalgos": convalgos, "alg": algorithm()})   # the printed line reproduces it


def test_the_adjoint_identity_alone_catches_a_backward_pass_that_is_not_the_transpose():
    with pytest.raises(CheckFailure) as caught:
        check_algorithm(user.NotTheTranspose(), checks=["adjoint"], max_examples=60, seed=0)
    failure = caught.value.counterexample
    assert failure.check == "adjoint" and asymmetric(failure.layer) and one_channel(failure.layer)
    assert "backward_data pass (not_the_transpose)" in failure.message
    with pytest.raises(CheckError, match=r"^\[adjoint\]"):
        exec(failure.call, {"convalgos": convalgos, "alg": user.NotTheTranspose()})
    assert check_algorithm(user.WithBackwardData(), checks=["adjoint"], max_examples=20).ok


def test_the_correct_algorithm_passes_and_the_result_says_what_held():
    result = check_algorithm(user.ShiftAndAdd(), max_examples=20, seed=0)
    forward = result.passes["forward"]
    assert result.ok and list(result.passes) == ["forward"] and forward.examples == 20
    assert all(forward.outcomes[check].startswith("held") for check in convalgos.testing.CHECKS)
    assert "forward: 20 layers checked" in result.describe()
    honest = check_algorithm(user.NotDeterministic(), max_examples=5, seed=0).passes["forward"]
    assert honest.outcomes["deterministic"] == "not claimed"


def test_steering_draws_the_layers_a_narrow_algorithm_supports():
    """Narrow takes 3x3 at stride 1, 5 of 1000 layers of the default strategy (seed 0): yet every one of
    100 examples reaches it."""
    forward = check_algorithm(user.Narrow(), max_examples=100, seed=0).passes["forward"]
    assert forward.examples == 100 and forward.refused == 0


def test_an_algorithm_that_refuses_every_layer_fails_and_says_why():
    with pytest.raises(CheckFailure, match="refused all"):
        check_algorithm(user.RefusesEverything(), max_examples=5)


def test_constraints_bound_the_layers_and_bad_arguments_are_named():
    result = check_algorithm(user.ShiftAndAdd(), max_examples=5, seed=0, checks=["agreement"],
                             constraints={"kernel": 3, "dtype": "float64"})
    assert result.passes["forward"].examples == 5
    with pytest.raises(ValueError, match="checks must be among"):
        check_algorithm(user.ShiftAndAdd(), checks=["speed"])
    with pytest.raises(ValueError, match="passes must be among"):
        check_algorithm(user.ShiftAndAdd(), passes=["sideways"])
    assert check_algorithm(user.ShiftAndAdd(), passes=["backward_data"]).passes["backward_data"].note == \
        "not implemented"


def test_check_layer_on_one_layer():
    direct = convalgos.ALGORITHMS["direct"]
    p = ConvParams.from_shapes((2, 4, 7, 7), (6, 2, 3, 3), padding=((0, 1), (2, 0)), dilation=2, groups=2)
    outcome = check_layer(direct, "backward_filter", p, seed=3)
    assert list(outcome) == list(convalgos.testing.CHECKS) and all(v.startswith("held") for v in outcome.values())
    refused = check_layer(convalgos.ALGORITHMS["winograd_4x4"], "forward", p)
    assert refused == {"supports": f"refused: {convalgos.ALGORITHMS['winograd_4x4'].supports(p).reason}"}
    with pytest.raises(CheckError, match=r"^\[written\]"):
        check_layer(user.UnwrittenLastColumn(), "forward", p)
    with pytest.raises(ValueError, match="checks must be among"):
        check_layer(direct, "forward", p, checks=["fast"])
