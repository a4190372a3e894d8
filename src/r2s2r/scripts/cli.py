"""What every r2s2r command line shares: draccus parsing with the command's docstring as help, quiet
third-party logs, and one-line errors instead of tracebacks for mistakes a user can fix."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TypeVar

import yaml
from draccus.argparsing import ArgumentParser
from draccus.utils import ParsingError

T = TypeVar("T")
USER_ERRORS = (ValueError, FileNotFoundError, RuntimeError, TypeError, KeyError, FloatingPointError)


def run(
    config_class: type[T], job: Callable[[T], int], doc: str | None, argv: list[str] | None, prog: str
) -> int:
    """Parse `argv` into `config_class` and run `job` on it.

    `--help` shows `doc` (the command's docstring) above the flags. A bad flag value or a user error
    raised by the job prints `prog: error: <one line>` and returns 2.
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("absl", "OpenGL", "httpx"):  # (never "root": getLogger("root") is the root logger)
        logging.getLogger(noisy).setLevel(logging.WARNING)
    parser = ArgumentParser(config_class=config_class, prog=prog, description=doc)
    try:
        cfg = parser.parse_args(argv)
        return job(cfg)
    except ParsingError as e:  # draccus wraps the config's own __post_init__ error: show that one
        cause = e.__cause__ if isinstance(e.__cause__, USER_ERRORS) else e
        print(f"{prog}: error: {cause}", file=sys.stderr)
    except yaml.YAMLError as e:  # draccus reads every flag value as YAML
        print(
            f"{prog}: error: a flag value is not valid YAML/JSON: {' '.join(str(e).split())}", file=sys.stderr
        )
    except USER_ERRORS as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
    return 2
