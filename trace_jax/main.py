"""Entry point: ``python -m trace_jax.main --config=configs/tiny.py [--config.<field>=...]``."""

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a get_config() file.")
flags.mark_flags_as_required(["config"])


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax/jax INFO chatter
    from trace_jax import distributed, run

    config = _CONFIG.value
    distributed.initialize(config.get("distributed"))  # before anything touches a device
    run.run(config)


if __name__ == "__main__":
    from trace_jax.cli import parse_flags

    app.run(main, flags_parser=parse_flags)
