"""list_output.LIST_MAXNREG, the Gluon lists' register caps (off by default; the GPU matrix's
test_gpu_register_capped_lists_match_torch runs them on a GPU): the setting, and that it keys plans and graphs, as
the launch shapes and claims ahead (list_output.CLAIM_AHEAD; list_output.claims_ahead's reach) do."""
import pytest
from fresh_process import run_fresh

from sparsegdn.triton import forward, list_output


def test_the_setting_is_read_at_import():
    done = run_fresh("from sparsegdn.triton import list_output; print(*list_output.LIST_MAXNREG)",
                     LIST_MAXNREG="168,0")
    assert done.returncode == 0 and done.stdout.split() == ["168", "0"], done.stderr[-300:]
    refused = run_fresh("from sparsegdn.triton import list_output", LIST_MAXNREG="168")
    assert refused.returncode != 0 and "SPARSEGDN_LIST_MAXNREG" in refused.stderr, refused.stderr[-300:]


@pytest.mark.parametrize("bad", ["168", "100,0", "a,b", "0,0,0", "168,-8", "256,0", ""])
def test_two_caps_each_none_or_a_multiple_of_eight_anything_else_refused(bad):
    with pytest.raises(ValueError, match="SPARSEGDN_LIST_MAXNREG"):
        list_output._register_caps(bad)


def test_good_settings_read_as_given():
    assert list_output._register_caps("0,0") == (0, 0)
    assert list_output._register_caps("168,128") == (168, 128)
    assert list_output._register_caps("64,248") == (64, 248)


def test_the_launch_shapes_are_read_at_import():
    done = run_fresh("from sparsegdn.triton import list_output as l; print(*l.OWN_LAUNCH, *l.STATE_LAUNCH)",
                     LIST_LAUNCH="1x3,1x2")
    assert done.returncode == 0 and done.stdout.split() == ["1", "3", "1", "2"], done.stderr[-300:]
    refused = run_fresh("from sparsegdn.triton import list_output", LIST_LAUNCH="1x3")
    assert refused.returncode != 0 and "SPARSEGDN_LIST_LAUNCH" in refused.stderr, refused.stderr[-300:]


@pytest.mark.parametrize("bad", ["2x2", "3x2,1x2", "2x0,1x2", "2x5,1x2", "2x2,1x2,1x1", "axb,1x2", "", "2x2,",
                                 "2x22,1x2", "2*2,1x2"])
def test_launch_shapes_other_than_two_of_one_or_two_stages_by_one_to_four_programs_refused(bad):
    with pytest.raises(ValueError, match="SPARSEGDN_LIST_LAUNCH"):
        list_output._launch_shapes(bad)


def test_launch_shapes_read_as_given():
    assert list_output._launch_shapes("2x2,1x2") == ((2, 2), (1, 2))
    assert list_output._launch_shapes("1x3,2x1") == ((1, 3), (2, 1))


@pytest.mark.parametrize("name, changed, same", [("LIST_MAXNREG", (168, 0), False), ("OWN_LAUNCH", (1, 3), False),
                                                 ("STATE_LAUNCH", (1, 1), False), ("LIST_MAXNREG", (0, 0), True),
                                                 ("CLAIM_AHEAD", True, False), ("CLAIM_AHEAD", False, False)])
def test_the_lists_launch_settings_are_design_switches(name, changed, same, monkeypatch):
    """Plans and CUDA graphs are keyed by forward.design_switches: a call under another cap or launch shape is not
    replayed from one recorded under the defaults (and the same setting keys the same)."""
    monkeypatch.setattr(list_output, "LIST_MAXNREG", (0, 0))
    monkeypatch.setattr(list_output, "CLAIM_AHEAD", "cut")      # the default
    plain = forward.design_switches()
    monkeypatch.setattr(list_output, name, changed)
    assert (forward.design_switches() == plain) == same


def test_claims_ahead_only_for_the_zero_state_list_at_two_stages_claiming(monkeypatch):
    """list_output.claims_ahead: the AHEAD form is launched only where CLAIM_AHEAD is on, for the zero-state list at
    two stages with claims (the form the GPU matrix's test_gpu_claims_ahead_equal_claims_at_once checks)."""
    monkeypatch.setattr(list_output, "CLAIM_AHEAD", True)
    assert list_output.claims_ahead(True, 2, False)
    assert not any(list_output.claims_ahead(claim, stages, state) for claim, stages, state in
                   ((False, 2, False), (True, 1, False), (True, 2, True)))
    assert list_output.claims_ahead(True, 2, False, cut=False)         # on: whatever the chains beside it walk
    monkeypatch.setattr(list_output, "CLAIM_AHEAD", False)
    assert not list_output.claims_ahead(True, 2, False)
    assert not list_output.claims_ahead(True, 2, False, cut=True)
    monkeypatch.setattr(list_output, "CLAIM_AHEAD", "cut")      # the default: only beside chains cut into segments
    assert list_output.claims_ahead(True, 2, False, cut=True)
    assert not list_output.claims_ahead(True, 2, False, cut=False)
    assert not any(list_output.claims_ahead(claim, stages, state, cut=True) for claim, stages, state in
                   ((False, 2, False), (True, 1, False), (True, 2, True)))


def test_the_claims_ahead_setting_is_read_at_import():
    """SPARSEGDN_LIST_CLAIM_AHEAD: cut (the default), 1 or 0; anything else refused at import, naming it."""
    code = "from sparsegdn.triton import list_output; print(repr(list_output.CLAIM_AHEAD))"
    seen = [run_fresh(code, **setting) for setting in ({}, {"LIST_CLAIM_AHEAD": "1"}, {"LIST_CLAIM_AHEAD": "0"})]
    assert [done.stdout.strip() for done in seen] == ["'cut'", "True", "False"], [done.stderr[-300:] for done in seen]
    refused = run_fresh("from sparsegdn.triton import list_output", LIST_CLAIM_AHEAD="yes")
    assert refused.returncode != 0 and "SPARSEGDN_LIST_CLAIM_AHEAD" in refused.stderr, refused.stderr[-300:]
