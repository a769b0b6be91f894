"""Usage mistakes in one line, as configuration mistakes get: what is wrong and the fix.

argparse answers a mistyped option with the top-level usage block and "unrecognized
arguments", and a missing required option with the command's whole usage block. ``one_line``
makes every parser of the command line answer instead with one line naming the command, the
mistake and its fix (``did you mean --port?``), and exit 2.
"""

from __future__ import annotations

import argparse
import difflib
import re
from typing import Any, NoReturn

_CHOICE = re.compile(r"argument (?P<arg>[^:]+): invalid choice: '(?P<word>[^']*)'")
_REQUIRED = "the following arguments are required: "
_UNRECOGNIZED = "unrecognized arguments: "


def one_line(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make ``parser`` and every parser under it report a usage mistake in one line."""

    seen: list[str] = []  # the words this parser was given, for a mistake's fix

    def error(message: str) -> NoReturn:
        unknown = _unknown_options(parser, seen)
        if message.startswith(_REQUIRED) and unknown:  # the typo is why it is "missing"
            message = _UNRECOGNIZED + " ".join(unknown)
        parser.exit(2, f"{parser.prog}: {explain(parser, message)}\n")

    parser.error = error  # type: ignore[method-assign]
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:  # a command's own parser: words it does not know are its mistake
        known = parser.parse_known_args

        def parse_known_args(*args: Any, **kwargs: Any) -> Any:
            seen[:] = [str(w) for w in (args[0] if args and args[0] is not None else [])]
            namespace, extra = known(*args, **kwargs)
            if extra:
                error(_UNRECOGNIZED + " ".join(extra))
            return namespace, extra

        parser.parse_known_args = parse_known_args  # type: ignore[method-assign]
    for action in subparsers:
        for sub in set(action.choices.values()):
            one_line(sub)
    return parser


def explain(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's ``message`` about ``parser`` as one line that names the fix."""
    help_hint = f"({parser.prog} --help lists them)"
    if message.startswith(_UNRECOGNIZED):
        words = message[len(_UNRECOGNIZED) :].split()
        options = [w for w in words if w.startswith("-")]
        if not options:
            return (
                f"unexpected {' '.join(words)!r}: {parser.prog} takes no such argument {help_hint}"
            )
        word = options[0].split("=", 1)[0]
        known = [s for a in parser._actions for s in a.option_strings]
        return f"unknown option {word}{_did_you_mean(word, known)} {help_hint}"
    if message.startswith(_REQUIRED):
        missing = message[len(_REQUIRED) :].split(", ")
        return "; ".join(f"{m} is required: add {_usage_of(parser, m)}" for m in missing)
    choice = _CHOICE.match(message)
    if choice is not None:
        action = next(
            (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None
        )
        choices = sorted(action.choices) if action is not None else []
        word = choice["word"]
        return (
            f"unknown command {word!r}{_did_you_mean(word, choices)} (one of: {', '.join(choices)})"
        )
    return message


def _unknown_options(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """The words that look like options and are no option of ``parser`` (nor a prefix of
    one, which argparse takes as an abbreviation)."""
    known = [s for a in parser._actions for s in a.option_strings]
    return [
        w
        for w in words
        if w.startswith("-") and not any(k.startswith(w.split("=", 1)[0]) for k in known)
    ]


def _did_you_mean(word: str, known: list[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f": did you mean {close[0]}?" if close else ""


def _usage_of(parser: argparse.ArgumentParser, name: str) -> str:
    """``--out OUT`` for the option ``--out`` (its metavar as the usage line shows it)."""
    for action in parser._actions:
        if name in action.option_strings or name in (action.metavar, action.dest):
            if not action.option_strings:
                return str(action.metavar or action.dest).upper()
            metavar = action.metavar or action.dest.upper()
            return f"{action.option_strings[0]} {metavar}" if action.nargs != 0 else name
    return name
