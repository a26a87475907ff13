"""The overrides that make each framework resume from the chosen folder, and the registry of
frameworks they come from."""

from __future__ import annotations

import pytest
from rljob_operator.frameworks import FRAMEWORKS, NAMES, resume_overrides

CKPT = "/data/run/global_step_150"


@pytest.mark.parametrize("path", [CKPT, CKPT + "/", CKPT + "//"])
@pytest.mark.parametrize(
    ("framework", "expected"),
    [
        ("rljob", [f"runner.resume_dir={CKPT}"]),
        ("rlinf", [f"runner.resume_dir={CKPT}"]),
        (
            "verl",
            [
                "trainer.resume_mode=resume_path",
                f"trainer.resume_from_path={CKPT}",
                "trainer.default_local_dir=/data/run",
            ],
        ),
    ],
)
def test_framework_overrides_never_end_in_a_slash(framework, expected, path):
    assert resume_overrides(framework, path) == expected


def test_the_step_the_frameworks_parse_back_is_the_folders_step():
    for override in resume_overrides("verl", CKPT + "/") + resume_overrides("rlinf", CKPT):
        value = override.split("=", 1)[1]
        if "global_step_" in value:
            assert int(value.split("global_step_")[-1]) == 150


def test_custom_template_is_split_like_a_shell_and_filled_per_word():
    template = "--load '{path}' --start-step={step} --note 'two words'"
    path = "/data/my run/global_step_007/"
    assert resume_overrides("custom", path, custom_template=template) == [
        "--load",
        "/data/my run/global_step_007",
        "--start-step=7",
        "--note",
        "two words",
    ]


def test_relative_path_is_kept_for_rlinf_but_refused_for_verl():
    assert resume_overrides("rlinf", "ckpts/global_step_3") == [
        "runner.resume_dir=ckpts/global_step_3"
    ]
    with pytest.raises(ValueError, match="absolute"):
        resume_overrides("verl", "ckpts/global_step_3")


@pytest.mark.parametrize(
    ("framework", "path", "template", "words"),
    [
        ("megatron", CKPT, None, "unknown framework"),
        ("rljob", "/data/run/latest", None, "no global_step_N"),
        ("verl", "/data/my run/global_step_1", None, "misread"),
        ("rlinf", "/data/a,b/global_step_1", None, "misread"),
        ("rljob", "/", None, "not a checkpoint folder"),
        ("custom", CKPT, "--from {dir}", "only {path} and {step}"),
        ("custom", CKPT, "--from {path.parent}", "only {path} and {step}"),
        ("custom", "/data/latest", "--step {step}", "uses {step}"),
        ("custom", CKPT, "--from '{path}", "bad custom resume template"),
    ],
)
def test_bad_requests_raise_value_error(framework, path, template, words):
    with pytest.raises(ValueError, match=words.replace("{", r"\{").replace("}", r"\}")):
        resume_overrides(framework, path, custom_template=template)


def test_a_custom_trainer_without_a_template_resumes_from_the_environment_alone():
    assert resume_overrides("custom", CKPT) == []


def test_the_crd_offers_exactly_the_registered_frameworks_with_known_parts():
    from rljob_operator.checkpoints.layouts import LAYOUTS
    from rljob_operator.launcher.launchers import LAUNCHERS
    from test_crd import CRD

    spec = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert spec["properties"]["spec"]["properties"]["framework"]["enum"] == list(NAMES)
    for name, framework in FRAMEWORKS.items():
        assert framework.name == name and framework.launcher in LAUNCHERS
        assert framework.auto_layout is None or framework.auto_layout in LAYOUTS


def test_trl_resumes_through_the_trainers_own_flag_from_a_checkpoint_folder():
    assert resume_overrides("trl", "/data/run/checkpoint-40/") == [
        "--resume_from_checkpoint=/data/run/checkpoint-40"
    ]
    with pytest.raises(ValueError, match="checkpoint-N"):
        resume_overrides("trl", CKPT)  # a global_step_N folder is no TRL checkpoint


def test_openrlhf_resumes_with_its_own_switch_from_a_folder_of_its_actor_directory():
    """--ckpt.load_enable; which folder it loads is the bridge's (test_ray_bridge.py)."""
    assert resume_overrides("openrlhf", "/ck/ppo/_actor/global_step40/") == ["--ckpt.load_enable"]
    with pytest.raises(ValueError, match="_actor/global_stepN"):
        resume_overrides("openrlhf", "/ck/ppo/global_step40")  # --ckpt.path itself
