"""The attribute analysis of an isolation matrix (pure)."""

from harness.matrix.analysis import DeploymentOutcome, analyse_attributes


def _d(label: str, passed: bool, **attrs: str) -> DeploymentOutcome:
    return DeploymentOutcome(label=label, passed=passed, attributes=attrs)


SEED_CASE = [
    _d("on-tuned", False, fusion="on", moe_config="tuned-E129", triton="3.6"),
    _d("on-none", False, fusion="on", moe_config="none", triton="3.6"),
    _d("off-tuned", True, fusion="off", moe_config="tuned-E128", triton="3.6"),
    _d("off-default", True, fusion="off", moe_config="default", triton="3.6"),
    _d("off-none", True, fusion="off", moe_config="none", triton="3.6"),
]


def test_seed_case_names_fusion_and_rules_out_kernel_config() -> None:
    findings = {f.attribute: f for f in analyse_attributes(SEED_CASE)}
    assert findings["fusion"].classification == "carrier"
    assert findings["fusion"].counts == {
        "on": {"pass": 0, "fail": 2},
        "off": {"pass": 3, "fail": 0},
    }
    assert findings["moe_config"].classification == "ruled_out"
    assert "none" in findings["moe_config"].explanation
    assert findings["triton"].classification == "constant"
    assert analyse_attributes(SEED_CASE)[0].attribute == "fusion"


def test_attribute_that_varies_within_both_groups_is_ruled_out() -> None:
    ds = [
        _d("a", False, cfg="x"),
        _d("b", False, cfg="y"),
        _d("c", True, cfg="z"),
        _d("d", True, cfg="w"),
    ]
    (f,) = analyse_attributes(ds)
    assert f.classification == "ruled_out"


def test_confounded_and_undetermined() -> None:
    ds = [_d("a", False, k="x"), _d("b", True, k="y"), _d("c", True, k="z")]
    assert analyse_attributes(ds)[0].classification == "confounded"
    ds = [_d("a", True, k="x"), _d("b", True, k="y")]
    assert analyse_attributes(ds)[0].classification == "undetermined"
    assert "every deployment passed" in analyse_attributes(ds)[0].explanation
    ds = [_d("a", False, k="x"), _d("b", True, k="x"), _d("c", True, k="y")]
    assert analyse_attributes(ds)[0].classification == "ruled_out"


def test_two_deployments_reduce_to_a_single_difference() -> None:
    ds = [_d("unfused", True, fusion="off"), _d("fused", False, fusion="on")]
    assert analyse_attributes(ds)[0].classification == "carrier"
