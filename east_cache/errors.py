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
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

EXIT_USER = 2           # the user's input, environment or a helper process: one `error:` line
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM: 128 + SIGINT, as shells report Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away (`| head`)
DEBUG_FLAG = "--debug"
DEBUG_ENV = "EAST_CACHE_DEBUG"   # set (to anything but 0) it shows the traceback, as --debug does


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


class CommandParser(argparse.ArgumentParser):
    """argparse's parser with --debug, whose usage errors are one `error:` line (exit status 2) instead of the
    whole usage followed by the message. Subcommands' parsers are of this class too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_argument(DEBUG_FLAG, action="store_true",
                          help=f"on a failure, show the traceback as well (default: off; also {DEBUG_ENV}=1)")

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
        status = body()
        sys.stdout.flush()   # here, not at exit: a closed pipe is then caught below
        return status
    except BrokenPipeError:
        return reader_gone()
    except KeyboardInterrupt as e:
        stderr_line(str(e) or interrupted)
        return EXIT_INTERRUPTED
    except Exception as e:   # noqa: BLE001 - ours are raised again, with their traceback
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


def check_output(path: Path, flag: str, folder: bool) -> None:
    """Refuse, before any slow work, an output path that cannot be written: a folder (folder=True) where a file
    is, a file where a folder is, anything under a file, or a path whose nearest existing folder cannot be
    written."""
    path = Path(path)
    want = "the path of a folder (it is made if missing)" if folder else "the path of a file to write"
    if path.exists() and path.is_dir() != folder:
        raise UsageError(f"{flag} {path}: {'a file' if folder else 'a folder'} is there; pass {want}")
    existing = nearest_existing(path)
    if existing != path and not existing.is_dir():
        raise UsageError(f"{flag} {path}: {existing} is a file, so nothing can be made inside it; pass {want}")
    if not os.access(existing, os.W_OK):
        raise UsageError(f"{flag} {path}: {existing} cannot be written (permission denied); pass {want} where "
                         f"you can write")


def nearest_existing(path: Path) -> Path:
    """path itself if it exists, else its nearest folder above that does (the root at worst)."""
    return path if path.exists() else next(p for p in path.parents if p.exists() or p == p.parent)


def same_file(a, b) -> bool:
    """Whether two paths name one file or folder: equal once resolved, or one file under two names (a link)."""
    a, b = Path(a), Path(b)
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:   # either is missing: no file is both
        return False


def refuse_input(path, flag: str, inputs: dict[str, object]) -> None:
    """Refuse, before any work, an output path that is one of the command's inputs ({what: path}), by resolved
    path or by file identity: writing it would destroy what the command reads."""
    for what, given in inputs.items():
        if given is not None and same_file(path, given):
            raise UsageError(f"{flag} {path}: that is {what} ({given}), which this command reads; writing it would "
                             f"destroy it: write elsewhere")
