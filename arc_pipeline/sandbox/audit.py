"""An audit hook (PEP 578) that names a forbidden operation before the kernel has to stop it.

The kernel layers (seccomp, Landlock, rlimits) are what enforce the rules; they stop an escape attempt
with SIGSYS or EPERM, which loses the detail of what was attempted and, for EPERM, lets a program catch
the error and carry on. This hook sees Python-level operations (``os.system``, ``open(..., "w")``,
sockets, ``ctypes``) before they reach the kernel, writes an ``UnsafeCode`` record naming the operation
and exits at once. A program that tampers with the hook only loses this naming, not the protection.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

#: Events that a program solving a grid puzzle never needs.
FORBIDDEN_EVENTS = frozenset(
    """
    os.system os.exec os.spawn os.posix_spawn os.fork os.forkpty os.killpg os.startfile
    subprocess.Popen pty.spawn
    os.remove os.rmdir os.rename os.mkdir os.chmod os.chown os.link os.symlink os.truncate os.utime
    os.chflags os.lchflags os.setxattr os.removexattr os.getxattr os.listxattr os.chroot
    shutil.copyfile shutil.copymode shutil.copystat shutil.copytree shutil.rmtree shutil.move
    shutil.chown shutil.make_archive shutil.unpack_archive tempfile.mkstemp tempfile.mkdtemp
    glob.glob glob.glob/2 resource.setrlimit resource.prlimit fcntl.fcntl fcntl.ioctl fcntl.flock
    fcntl.lockf
    ctypes.dlopen ctypes.dlsym ctypes.dlsym/handle ctypes.cdata ctypes.cdata/buffer ctypes.call_function
    ctypes.addressof ctypes.string_at ctypes.wstring_at ctypes.PyObj_FromPtr ctypes.get_errno
    ctypes.set_errno ctypes.create_string_buffer ctypes.create_unicode_buffer
    socket.__new__ socket.bind socket.connect socket.getaddrinfo socket.gethostbyname
    socket.gethostbyname_ex socket.gethostbyaddr socket.gethostname socket.getnameinfo
    socket.getservbyname socket.getservbyport socket.sendmsg socket.sendto socket.sethostname
    urllib.Request http.client.connect ftplib.connect smtplib.connect poplib.connect imaplib.open
    nntplib.connect telnetlib.Telnet.open webbrowser.open sqlite3.connect sys.remote_exec
    """.split()
)
_SIGNAL_EVENTS = frozenset({"os.kill", "signal.pthread_kill"})
_DIRECTORY_EVENTS = frozenset({"os.listdir", "os.scandir"})
#: Pseudo file names of compiled code: CPython tries to open them to quote a line in a SyntaxError.
PSEUDO_FILES = frozenset({"<program>", "<prelude>", "<string>", "<unknown>"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _inside(path: Any, roots: Sequence[str]) -> bool:
    if isinstance(path, int):
        return True  # an already open descriptor: the child holds only its pipe and /dev/null
    try:
        text = os.fsdecode(path)
    except TypeError:
        return False
    absolute = os.path.normpath(os.path.join("/", os.getcwd(), text))
    return any(absolute == root or absolute.startswith(root + os.sep) for root in roots)


def make_hook(
    file_roots: Sequence[str], listing_roots: Sequence[str], report: Callable[[str], None]
) -> Callable[[str, tuple], None]:
    """The hook; ``report(description)`` must record UnsafeCode and end the process.

    Files may be opened for reading beneath ``file_roots``; directories listed beneath either.
    """
    roots = tuple(file_roots)
    listable = roots + tuple(listing_roots)
    own_pid = os.getpid()

    def hook(event: str, args: tuple) -> None:
        if event in FORBIDDEN_EVENTS:
            report(event)
        elif event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if path in PSEUDO_FILES and not writes:
                return
            if writes and not isinstance(path, int):
                report(f"open({path!r}, {mode or flags!r}) for writing")
            elif not _inside(path, roots):
                report(f"open({path!r}) outside the importable modules")
        elif event in _DIRECTORY_EVENTS:
            if args and args[0] is not None and not _inside(args[0], listable):
                report(f"{event}({args[0]!r})")
        elif event in _SIGNAL_EVENTS:
            if event == "os.kill" and args and args[0] == own_pid:
                return
            if event == "signal.pthread_kill":
                return  # targets a thread of this process
            report(f"{event}{args!r}")

    return hook


def loaded_ctypes_functions() -> list[Any]:
    """Every ctypes function object this process holds (run once in the worker, after its imports).

    Calling a function object that already exists raises no audit event in CPython (only looking one
    up does), so a program could reach e.g. the worker's own ``prctl`` without the hook noticing.
    """
    import ctypes
    import gc

    return [obj for obj in gc.get_objects() if isinstance(obj, ctypes._CFuncPtr)]


class _ReportCall:
    """An argument converter that raises the audit event ``ctypes.call_function`` before any call."""

    @classmethod
    def from_param(cls, value: object) -> object:
        import sys

        sys.audit("ctypes.call_function", 0, ())
        raise TypeError("calling ctypes functions is forbidden")


def label_ctypes_calls(functions: Sequence[Any]) -> None:
    """In the child, after its own setup: make each call through ``functions`` pass through the hook.

    ctypes converts the first argument with the converter before it calls; a call without
    arguments fails with TypeError before reaching native code.
    """
    for function in functions:
        try:
            function.argtypes = (_ReportCall,)
        except (AttributeError, TypeError):
            pass
