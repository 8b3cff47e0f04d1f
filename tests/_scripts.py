"""Loading a script under experiments/ (not a package) as a module, for its tests."""

import importlib.util
import os

_EXPERIMENTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "experiments")


def load_experiment(name: str):
    """The module of ``experiments/{name}.py``, executed once per call."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(_EXPERIMENTS, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
