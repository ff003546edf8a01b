"""What every command group shares: the one-line error (:class:`CliError`), the
parser that reports one, argument types that refuse what the core would, and the
progress line of a slow step (:func:`progress`)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn


class CliError(Exception):
    """A usage mistake the command line itself detects (exit status 2)."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the message and where to find help, no usage
    block (the rule for every CLI error is one line on stderr, exit status 2)."""

    def error(self, message: str) -> NoReturn:
        """Exit with status 2 and the one-line message."""
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def int_in(low: int, high: int) -> Any:
    """An argparse type: an integer in low..high (argparse names the flag)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
        return value

    return parse


def finite_float(text: str) -> float:
    """An argparse type: a finite number (NaN would silently gate out everything)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


# Budgets and counts go to the core as 64-bit integers.
MAX_COUNT = 2**63 - 1


def check_paths(paths: Sequence[str]) -> None:
    """CliError unless every path exists (a broken symbolic link named as one)."""
    for p in paths:
        if not os.path.lexists(p):
            raise CliError(f"{p}: no such file or directory")
        if not os.path.exists(p):
            raise CliError(f"{p}: broken symbolic link")


@contextlib.contextmanager
def progress(what: str, *, after: float = 2.0, every: float = 15.0) -> Iterator[None]:
    """Say on stderr what a step is doing once it has taken ``after`` seconds
    (``rampart: WHAT …``), again every ``every`` seconds with the time so far, and
    how long it took when it ends; a step that ends sooner prints nothing, so fast
    runs and error lines stay one line. A thread waits on an event: the step itself
    runs undisturbed (a model load, an embedding batch, a native call)."""
    done = threading.Event()
    said = threading.Event()
    t0 = time.perf_counter()

    def tell() -> None:
        wait = after
        while not done.wait(wait):
            elapsed = time.perf_counter() - t0
            tail = " …" if not said.is_set() else f" … ({elapsed:.0f} s so far)"
            print(f"rampart: {what}{tail}", file=sys.stderr, flush=True)
            said.set()
            wait = every

    thread = threading.Thread(target=tell, name="rampart-progress", daemon=True)
    thread.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        done.set()
        thread.join()
        if ok and said.is_set():
            took = time.perf_counter() - t0
            print(f"rampart: {what}: done in {took:.1f} s", file=sys.stderr, flush=True)
