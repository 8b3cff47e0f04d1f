"""Flag parsing for the ``--config`` programs (``trace_jax.main``, ``diagnose``, ``params``).

ml_collections raises a bare ``AttributeError`` from deep inside absl's parsing when an override
names no config field (``--config.train.stepz=3``); :func:`parse_flags` turns that into absl's
usual one-line ``FATAL Flags parsing error`` naming the override and ml_collections' suggestion,
and exit status 1, as absl does for a value of the wrong type.
"""

from __future__ import annotations

import re
import sys

from absl import app, flags


def _innermost(err: BaseException) -> BaseException:
    while err.args and isinstance(err.args[0], BaseException):  # AttributeError(KeyError(msg))
        err = err.args[0]
    return err


def _text(err: BaseException) -> str:
    return str(err.args[0]) if err.args else str(err)


def _key(text: str) -> str:
    key = re.match(r"""\W*([^'"\n]+)""", text)
    return key.group(1) if key else ""


def _overrides_naming(argv, key: str) -> list[str]:
    return [a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.") and key
            and key in a.split("=", 1)[0].split(".")]


def unknown_field_message(argv, err: BaseException) -> str:
    """The one-line error for a config override whose field does not exist: the override(s) from
    ``argv`` naming the missing key, and ml_collections' "Did you mean ..." when it has one."""
    text = _text(_innermost(err))
    key = _key(text)
    hint = " ".join(line.strip() for line in text.splitlines()[1:] if line.strip())
    where = ", ".join(_overrides_naming(argv, key)) or "a --config override"
    return f"{where}: the config has no field {key!r}" + (f" ({hint})" if hint else "")


def parse_flags(argv):
    """``absl.app.run``'s ``flags_parser``: absl's own parsing and usage errors
    (``app.parse_flags_with_usage``), and, when an override names a field the config lacks
    (ml_collections' KeyError), one line naming it (exit 1) instead of a traceback. Other
    errors, e.g. from the config file's own code, propagate unchanged."""
    try:
        rest = app.parse_flags_with_usage(argv)
    except (AttributeError, KeyError) as e:
        inner = _innermost(e)
        if not (isinstance(inner, KeyError) and _overrides_naming(argv, _key(_text(inner)))):
            raise
        _fatal(unknown_field_message(argv, e))
    if len(rest) > 1:  # (the programs take flags only: a stray word would be dropped)
        _fatal(f"unexpected arguments {rest[1:]}: flags take the form --name=value (a config "
               f"override --config.<field>=<value>)")
    if "config" in flags.FLAGS:
        try:  # (loaded lazily: a missing file would surface later as a long traceback)
            flags.FLAGS["config"].value.get  # (a failed load's placeholder raises on any attribute)
        except OSError as e:
            if "No such file" not in str(e):
                raise
            _fatal("--config: " + str(e).strip().splitlines()[-1].strip())  # ([Errno 2] ...)
    return rest


def _fatal(msg: str):
    sys.stderr.write(f"FATAL Flags parsing error: {msg}\n")
    sys.exit(1)
