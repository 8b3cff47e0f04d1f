"""Config-override errors of the ``--config`` programs (trace_jax.cli): one line that names the
override and the field, from ml_collections' real exception."""

import pytest
from ml_collections import ConfigDict

from trace_jax import cli


def _error(cfg, path):
    node = cfg
    with pytest.raises((AttributeError, KeyError)) as e:
        for part in path:
            node = getattr(node, part)
    return e.value


def test_unknown_field_names_the_override_and_the_suggestion():
    cfg = ConfigDict({"train": {"steps": 3, "lr": 1e-4}, "model": {"d_model": 8}})
    err = _error(cfg, ["train", "stepz"])
    msg = cli.unknown_field_message(["prog", "--config=c.py", "--config.train.stepz=3",
                                     "--config.model.d_model=4"], err)
    assert msg.startswith("--config.train.stepz: the config has no field 'stepz'"), msg
    assert 'Did you mean "steps"' in msg and "\n" not in msg and "\\" not in msg


def test_unknown_top_level_field_and_no_suggestion():
    cfg = ConfigDict({"train": {"steps": 3}})
    err = _error(cfg, ["zzzzzz"])
    msg = cli.unknown_field_message(["prog", "--config.zzzzzz.a=1"], err)
    assert msg == "--config.zzzzzz.a: the config has no field 'zzzzzz'", msg


def test_parse_flags_exits_with_one_line(monkeypatch, capsys):
    def boom(argv):
        cfg = ConfigDict({"train": {"steps": 3}})
        return cfg.train.stepz

    monkeypatch.setattr(cli.app, "parse_flags_with_usage", boom)
    with pytest.raises(SystemExit) as e:
        cli.parse_flags(["prog", "--config.train.stepz=1"])
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--config.train.stepz" in err[0] and '"steps"' in err[0], err


def test_parse_flags_leaves_other_errors_alone(monkeypatch):
    """An AttributeError that is not an override's missing field (e.g. from the config file's
    own code) keeps its traceback."""
    def boom(argv):
        raise AttributeError("module 'numpy' has no attribute 'flot'")

    monkeypatch.setattr(cli.app, "parse_flags_with_usage", boom)
    with pytest.raises(AttributeError, match="flot"):
        cli.parse_flags(["prog", "--config=c.py"])


@pytest.mark.parametrize("name", ["tiny", "small", "qwen3_30b_a3b"])
def test_config_files_are_locked_but_task_options_and_mesh_rules_open(name):
    """A config file that sets a field the schema lacks (``rollout.max_new_token``) fails as it
    loads, naming it with the suggestion; before, ``update`` added the field and the run
    silently kept the default. The task's own options and mesh rules take new keys."""
    import importlib

    c = importlib.import_module(f"configs.{name}").get_config()
    with pytest.raises(KeyError, match='max_new_token.*Did you mean "max_new_tokens"'):
        c.rollout.update(max_new_token=12)
    with pytest.raises(AttributeError, match="hint_layer"):
        c.numerics.hint_layer = "all"
    c.task.kwargs.reverse = True
    c.mesh.rules.update(experts=("expert",))
    assert c.task.kwargs.reverse and "experts" in c.mesh.rules
    c.numerics.sites = ("attn/kv",)  # (tuples: a --config.numerics.sites override can set them)


@pytest.mark.parametrize("args,msg", [
    (["--config=configs/tiny.py", "config.train.steps=0"],
     "unexpected arguments ['config.train.steps=0']: flags take the form --name=value"),
    (["--config=configs/tiny.py", "/tmp/some_run"], "unexpected arguments ['/tmp/some_run']"),
    (["--config=configs/no_such.py"],
     "--config: [Errno 2] No such file or directory: 'configs/no_such.py'"),
])
def test_programs_refuse_stray_arguments_and_a_missing_config_file(args, msg):
    """A word without -- (a forgotten dash, a checkpoint path without --checkpoint=) used to be
    dropped silently (diagnose then ran a random-init policy); a missing config file ended in a
    long traceback. Both are now one FATAL line and exit status 1."""
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-m", "trace_jax.params", *args], cwd=repo,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"FATAL Flags parsing error: {msg}"), \
        out.stderr[-1500:]
