"""The one rule every command ends a failure by, and the errors a user can meet.

A failure that is the user's input, environment or a helper process that died ends in one `error: ...` line
that names the thing and says what to do, exit status 2 (130 on Ctrl-C); a traceback is shown only for our own
bugs, or with --debug (or EAST_CACHE_DEBUG=1). Every entry point's main goes through run_command and parses its
flags with CommandParser: `east-cache` / `python -m preprocess`, `east-train` / train.py (each rank under
torchrun), `east-predict` / predict.py.
"""
from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path

EXIT_USER = 2           # the user's input, environment or a helper process: one `error:` line
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM: 128 + SIGINT, as shells report Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away (`| head`)
DEBUG_FLAG = "--debug"
DEBUG_ENV = "EAST_CACHE_DEBUG"   # set (to anything but 0) it shows the traceback, as --debug does
CACHE_COMMAND = "east-cache"            # the cache tool's console script (pyproject.toml [project.scripts])
MODULE_COMMAND = "python -m preprocess"   # the same tool run from a checkout
CONSOLE_SCRIPTS = ("east-cache", "east-train", "east-predict")   # a process started by one runs an installed package
_named_as: list[str] = []   # how the running `east-cache` command was invoked (cli.main, while it runs)


def cache_command(words: str = "") -> str:
    """The cache tool's command as a message or help suggests it, followed by words ("verify CACHE"): the way the
    user ran the command that says it (`east-cache ...` or `python -m preprocess ...`); from train.py, predict.py
    or a user's own script, east-cache where a console script started the process, else python -m preprocess.
    The one place a message gets the command's name from."""
    name = _named_as[-1] if _named_as else (
        CACHE_COMMAND if Path(sys.argv[0]).name in CONSOLE_SCRIPTS else MODULE_COMMAND)
    return f"{name} {words}".rstrip()


class CacheHint:
    """A text that names a cache-tool command ("run `{command} verify CACHE`"), made when a message embeds it
    (f"...: {REPAIR}"), so that a module's constant names the command as cache_command() says at that moment."""

    def __init__(self, template: str):
        self.template = template

    def __str__(self) -> str:
        return self.template.format(command=cache_command())

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


# what a damaged cache file's error says to do
REPAIR = CacheHint("run `{command} verify CACHE`, then the build command it prints")


def invoked_as(argv0: str, module_command: str = MODULE_COMMAND, module_file: str = "__main__.py") -> str:
    """The command name to show in usage and hints: the console script's or script's name, or module_command
    where Python ran module_file (`python -m ...`)."""
    name = Path(argv0).name
    return module_command if name in (module_file, "") else name


@contextmanager
def cache_command_named(name: str) -> Iterator[None]:
    """Inside, cache_command() says `name` (how the running east-cache command was invoked)."""
    _named_as.append(name)
    try:
        yield
    finally:
        _named_as.pop()


class UserError(Exception):
    """A failure of the user's input, environment or a helper process: its message names the file, the image,
    the flag or the process, and says what to do. run_command prints it as one line."""
    exit_status = EXIT_USER


class DataError(UserError, ValueError):
    """A problem with the input data (annotations, images)."""


class CacheError(UserError, ValueError):
    """A cache that cannot be read as it is; the message says what to run."""


class RemoteError(CacheError):
    """A transfer to or from storage (a bucket) that failed for good: the message names the URL, without
    credentials, and says what to do; nothing half-transferred is left under a final name."""


class BuildError(UserError, RuntimeError):
    """The build cannot go on (lock held, disk full); the existing cache is untouched."""


class UsageError(UserError, ValueError):
    """Flags that do not fit together, or a path that cannot be what the flag needs."""


class WorkerDied(UserError, RuntimeError):
    """A worker process (a loader's) was killed or exited: the message names it and says how to run again."""


# userinfo (user:secret@) and query strings (a presigned URL's signature) of any URL inside a text
URL_SECRETS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@|(\?[^\s'\"]*)")


def redact(text: str) -> str:
    """text with the userinfo and query string of every URL in it replaced: safe to print or log."""
    return URL_SECRETS.sub(lambda m: m.group(1) + "***@" if m.group(1) else "?***", str(text))


# The advice a bad-image error gives a build run without --skip-bad ("..., or pass --skip-bad to leave it out").
_SKIP_ADVICE = re.compile(r",? or pass --skip-bad\b[^;]*")


def skipped_reason(why: str) -> str:
    """A bad image's error as the summary of a --skip-bad build shows it: without the advice to pass --skip-bad."""
    return _SKIP_ADVICE.sub("", why)


def interrupt_in(e: BaseException | None) -> KeyboardInterrupt | None:
    """The Ctrl-C (SIGTERM) that e is, or that was unwinding when e was raised: cleanup that the interrupt left
    half done may fail in its turn (np.savez, stopped inside zipfile's open, raises ValueError as it closes the
    archive), and that failure is the interrupt, not a bug to show. None where no interrupt is behind e."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return e
        seen.add(id(e))
        e = e.__context__
    return None


class BuildInterrupted(KeyboardInterrupt):
    """Ctrl-C during a build after the new cache was committed: what is left undone is only cleanup."""

    def __init__(self, message: str = "interrupted after the new cache was committed: it is complete; files of the "
                                      "previous build that are left in data/ go at the next build"):
        super().__init__(message)


class BuildStopped(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a build, before its commit: the previous cache is intact, and what the next build
    of the same command takes over is said in numbers."""

    def __init__(self, kept: int, samples: int, files_done: int, files: int, in_unfinished: int):
        super().__init__(f"interrupted: the previous cache, if any, is intact; {kept} of {samples} samples are kept "
                         f"for the next build ({files_done} of {files} file(s) finished, {in_unfinished} sample(s) "
                         f"written into unfinished ones); run the same command again to make the other "
                         f"{samples - kept}")


# actions a flag may be given several times for: each occurrence adds (append, extend, append_const) or counts
REPEATABLE = (argparse._AppendAction, argparse._AppendConstAction, argparse._CountAction)


class CommandParser(argparse.ArgumentParser):
    """argparse's parser with --debug, whose usage errors are one `error:` line (exit status 2) instead of the
    whole usage followed by the message. Subcommands' parsers are of this class too.

    An option that holds one value (store, store_true, a BooleanOptionalAction...) given twice is refused, naming
    both occurrences: argparse would keep the last one silently (`--pred A --pred B` scoring B only). Options whose
    every occurrence counts (action="append", "extend", "count") may repeat."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._given: dict[argparse.Action, list[str]] = {}
        self.add_argument(DEBUG_FLAG, action="store_true",
                          help=f"on a failure, show the traceback as well (default: off; also {DEBUG_ENV}=1)")

    def parse_known_args(self, args=None, namespace=None):
        self._given = {}   # the options met in this parse (a subcommand's parser counts its own)
        return super().parse_known_args(args, namespace)

    def _get_values(self, action, arg_strings):
        # argparse calls this once per occurrence of an option, before its action stores the value
        if action.option_strings and not isinstance(action, REPEATABLE):
            if action in self._given:
                first, now = (" ".join(v) for v in (self._given[action], arg_strings))
                both = f" ({first} and {now})" if first or now else ""
                raise argparse.ArgumentError(action, f"given twice{both}; it takes one value: pass it once")
            self._given[action] = list(arg_strings)
        return super()._get_values(action, arg_strings)

    def error(self, message: str):
        stderr_line(f"error: {message}; see `{self.prog} --help`")
        sys.exit(EXIT_USER)


def stderr_line(line: str) -> None:
    """line and its newline on stderr in one write: print() writes them apart where the stream is unbuffered
    (PYTHONUNBUFFERED, python -u), and the lines of a torchrun job's ranks, which share one stderr, ran together."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def run_command(body: Callable[[], int], argv: list[str] | None = None, interrupted: str = "interrupted",
                kept: str = "") -> int:
    """body's exit status, or the status of its failure under the rule above. interrupted: the line a Ctrl-C
    prints (a KeyboardInterrupt with a message of its own prints that); kept: what an OSError (a full disk, a
    folder not writable) leaves as it was, said after its line."""
    argv = sys.argv[1:] if argv is None else argv
    debug = DEBUG_FLAG in argv or os.environ.get(DEBUG_ENV, "0") not in ("", "0")
    try:
        with CommandInputs():   # what the command declares it reads, for every file it writes (atomic.py)
            status = body()
        sys.stdout.flush()   # here, not at exit: a closed pipe is then caught below
        return status
    except BrokenPipeError:
        return reader_gone()
    except KeyboardInterrupt as e:
        stderr_line(str(e) or interrupted)
        return EXIT_INTERRUPTED
    except Exception as e:   # noqa: BLE001 - ours are raised again, with their traceback
        if (stop := interrupt_in(e)) is not None and not debug:   # its own line (BuildInterrupted's...) still
            stderr_line(str(stop) or interrupted)
            return EXIT_INTERRUPTED
        line = user_message(e)
        if line is None or debug:
            raise
        if kept and isinstance(e, OSError):
            line += f"; {kept}"
        stderr_line(f"error: {rank_prefix()}{line}")
        return getattr(e, "exit_status", EXIT_USER)


def rank_prefix() -> str:
    """Under torchrun, every process of the job says its own line: all but rank 0 name their rank."""
    rank = int(os.environ.get("RANK", "0")) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else 0
    return f"rank {rank}: " if rank else ""


def user_message(e: BaseException) -> str | None:
    """The one line for a failure that is the user's input, environment or a helper process; None for a bug."""
    if isinstance(e, UserError):
        return one_line(e)
    if isinstance(e, BrokenProcessPool):   # loky: a build worker was killed (the out-of-memory killer, kill -9)
        codes = re.search(r"exit codes of the workers are (\{.*?\})", str(e))
        return (f"a worker process of the build died{f' (exit codes {codes[1]})' if codes else ''}; SIGKILL is "
                f"often the kernel's out-of-memory killer: run the build again (finished files are kept), with "
                f"fewer --jobs if memory is short")
    if isinstance(e, OSError):
        return os_message(e)
    return None


OS_ADVICE = {errno.ENOSPC: "free some space, or write elsewhere", errno.EDQUOT: "free some space, or write elsewhere",
             errno.EACCES: "check its permissions, or write elsewhere", errno.EPERM: "check its permissions",
             errno.EROFS: "write elsewhere", errno.ENOENT: "check the path"}


def os_message(e: OSError) -> str:
    """An OSError as `path: what happened; what to do`."""
    what = e.strerror or str(e)
    where = f"{e.filename}: " if e.filename else ""
    advice = OS_ADVICE.get(e.errno, "check the path and run again")
    return f"{where}{what}; {advice}"


def one_line(e: BaseException) -> str:
    """The error's own message. One raised in a DataLoader worker (a cache rebuilt under a run) is re-raised by
    torch with the worker's traceback in its text, whose last line is "module.Class: message"."""
    text = str(e)
    return text.rstrip().splitlines()[-1].split(": ", 1)[-1] if "Original Traceback" in text else text


def reader_gone() -> int:
    """`info | head`: the reader stopped reading. Say nothing; point stdout at /dev/null so that the flush at
    exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


class CommandInputs:
    """What the running command declared it reads (inputs.py: an Input, its resolved path, its InputFiles) and the
    files it wrote (by identity): run_command opens one round each command (`with CommandInputs():`);
    inputs.declare_inputs fills it; the door (atomic.py) checks every file written against `current().inputs`.
    Outside a command none is open: nothing is declared or checked."""
    stack: list[CommandInputs] = []

    def __init__(self):
        self.inputs: list[tuple] = []   # (Input, Path, InputFiles)
        self.wrote: set[tuple[int, int]] = set()

    def __enter__(self) -> CommandInputs:
        CommandInputs.stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        CommandInputs.stack.remove(self)

    @classmethod
    def current(cls) -> CommandInputs | None:
        return cls.stack[-1] if cls.stack else None
