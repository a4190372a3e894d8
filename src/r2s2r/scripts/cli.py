"""What every r2s2r command line shares: draccus parsing with the command's docstring as help, quiet
third-party logs, and the one place where failures become messages.

An expected failure ends the command with `<prog>: error: <one line>` on stderr, naming the file or the
flag at fault and the fix, and exit status 2:

- a `UserError` (`r2s2r.errors`) from any layer: a damaged file, an interrupted recording, a setting
  changed on resume, a policy that raised, a full disk;
- a `ValueError` raised by r2s2r's own code (the configs' checks name the field, the value and the fix),
  and any `FileNotFoundError` (it names the path);
- a bad flag: unknown or abbreviated (flags are matched in full, never by prefix), a value of the wrong
  type, a value that is not YAML;
- an `OSError` saying the disk is full, wherever it was raised.

Anything else is a bug and keeps its traceback. `R2S2R_TRACEBACK=1` shows the traceback of every failure.
"""

from __future__ import annotations

import difflib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml
from draccus.argparsing import ArgumentParser
from draccus.utils import DecodingError, ParsingError

from r2s2r.errors import UserError
from r2s2r.files import is_disk_full

T = TypeVar("T")
PACKAGE = Path(__file__).resolve().parents[1]  # src/r2s2r: where r2s2r's own code lives


class FlagError(UserError, ValueError):
    """A command-line flag that does not exist, or a value it cannot take."""


def run(
    config_class: type[T], job: Callable[[T], int], doc: str | None, argv: list[str] | None, prog: str
) -> int:
    """Parse `argv` into `config_class` and run `job` on it.

    `--help` shows `doc` (the command's docstring) above the flags. An expected failure (see the module
    docstring) prints `prog: error: <one line>` and returns 2; any other exception propagates.
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("absl", "OpenGL", "httpx"):  # (never "root": getLogger("root") is the root logger)
        logging.getLogger(noisy).setLevel(logging.WARNING)
    parser = ArgumentParser(config_class=config_class, prog=prog, description=doc, allow_abbrev=False)
    parser.parser.error = lambda message: _flag_error(parser, message)  # not argparse's usage + exit
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return job(parser.parse_args(argv))
    except Exception as e:
        message = failure_message(e, argv)
        if message is None or os.environ.get("R2S2R_TRACEBACK"):
            raise
        _close_progress_bars()  # so that the error starts a line of its own
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2


def failure_message(e: BaseException, argv: list[str] = ()) -> str | None:
    """The one line to print for an expected failure `e`; None for a bug, which keeps its traceback."""
    if isinstance(e, UserError):
        return one_line(str(e))
    if isinstance(e, ParsingError):  # draccus wraps a config's own check: show that one
        if e.__cause__ is not None and (own := failure_message(e.__cause__)) is not None:
            return own
        if isinstance(e, DecodingError) and e.key_path:
            flag, what = "--" + ".".join(e.key_path), e.message.strip().splitlines()[0].rstrip(".")
            return f"{flag}: {what[:1].lower()}{what[1:]}; give it a value of its type (see --help)."
        return None if e.__cause__ is not None else one_line(str(e))
    if isinstance(e, yaml.YAMLError):  # draccus reads every flag value as YAML
        problem = getattr(e, "problem", None) or one_line(str(e))
        mark = getattr(e, "problem_mark", None)
        where = f" at column {mark.column + 1}" if mark is not None else ""
        return (
            f"{_flag_not_yaml(argv)} is not valid YAML/JSON ({problem}{where}); write it as YAML, e.g. "
            "--policy.kwargs='{skill: noisy}' or --world.cameras='[top, left_wrist]'."
        )
    if isinstance(e, FileNotFoundError):
        return (
            one_line(str(e))
            if e.filename is None
            else f"{e.filename}: no such file or folder; check the path."
        )
    if isinstance(e, ValueError) and raised_by_r2s2r(e):
        return one_line(str(e))
    if is_disk_full(e):
        filename = getattr(e, "filename", None)  # an OSError's; a library's wrapper of one has none
        where = f"writing {filename}" if filename else "no space left on the device"
        return f"the disk is full ({where}); free space or write elsewhere, then re-run."
    return None


def raised_by_r2s2r(e: BaseException) -> bool:
    """Whether `e` was raised in r2s2r's own code, not inside a library it called."""
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(PACKAGE)


def one_line(message: str) -> str:
    """A message's one line: an error re-raised from a worker process carries the worker's traceback in
    its message, of which the last line is the error."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else "(no message)"
    last = lines[-1]
    name, sep, rest = last.partition(": ")
    return rest if sep and name.replace(".", "").replace("_", "").isalnum() and " " not in name else last


def _close_progress_bars() -> None:
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def _flag_error(parser: ArgumentParser, message: str):
    """argparse's complaint about a flag as a `FlagError`, with the nearest real flag as the fix."""
    known = [o for o in parser.parser._option_string_actions if o.startswith("--")]
    if message.startswith("unrecognized arguments: "):
        flag = message.removeprefix("unrecognized arguments: ").split()[0].split("=")[0]
        near = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}? " if near else ""
        raise FlagError(f"{flag}: no such flag; {hint}flags are spelled out in full (see --help).")
    raise FlagError(f"{message}; see --help.")


def _flag_not_yaml(argv: list[str]) -> str:
    """The first `--flag=value` of `argv` whose value YAML cannot read (`a flag value` if none is found)."""
    for arg in argv:
        flag, sep, value = arg.partition("=")
        if sep and flag.startswith("--"):
            try:
                yaml.safe_load(value)
            except yaml.YAMLError:
                return flag
    return "a flag value"
