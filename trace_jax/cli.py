"""Flag parsing for the ``--config`` programs (``trace_jax.main``, ``diagnose``, ``params``).

ml_collections raises a bare ``AttributeError`` from deep inside absl's parsing when an override
names no config field (``--config.train.stepz=3``); :func:`parse_flags` turns that into absl's
usual one-line ``FATAL Flags parsing error`` naming the override and ml_collections' suggestion,
and exit status 1, as absl does for a value of the wrong type.
"""

from __future__ import annotations

import re
import sys

from absl import flags


def unknown_field_message(argv, err: BaseException) -> str:
    """The one-line error for a config override whose field does not exist: the override(s) from
    ``argv`` naming the missing key, and ml_collections' "Did you mean ..." when it has one."""
    while err.args and isinstance(err.args[0], BaseException):  # AttributeError(KeyError(msg))
        err = err.args[0]
    text = str(err.args[0]) if err.args else str(err)
    key = re.match(r"""\W*([^'"\n]+)""", text)
    key = key.group(1) if key else ""
    hint = " ".join(line.strip() for line in text.splitlines()[1:] if line.strip())
    args = [a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.") and key
            and key in re.split(r"[.=]", a.split("=", 1)[0])]
    where = ", ".join(args) if args else "a --config override"
    return f"{where}: the config has no field {key!r}" + (f" ({hint})" if hint else "")


def parse_flags(argv):
    """``absl.app.run``'s ``flags_parser``: absl's own parsing, with an unknown config field
    reported in one line (exit 1) instead of a traceback."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        sys.stderr.write(f"FATAL Flags parsing error: {e}\n"
                         "Pass --helpshort or --helpfull to see help on flags.\n")
        sys.exit(1)
    except (AttributeError, KeyError) as e:
        sys.stderr.write(f"FATAL Flags parsing error: {unknown_field_message(argv, e)}\n")
        sys.exit(1)
