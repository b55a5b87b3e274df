"""A seccomp-BPF filter for the process that runs one program (x86-64 Linux), installed with ctypes.

The filter is an allowlist: the system calls a Python + numpy computation needs are allowed; calls that
only an escaping program makes (process creation, exec, sockets, signalling other processes, writing or
deleting files, privilege and rlimit changes, namespaces, ptrace, kernel interfaces) kill the process
with SIGSYS, which the sandbox records as ``UnsafeCode``; anything else fails with EPERM.
Works unprivileged once ``PR_SET_NO_NEW_PRIVS`` is set.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000

_RET_KILL = 0x80000000  # SECCOMP_RET_KILL_PROCESS
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

_OFF_NR = 0
_OFF_ARCH = 4

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def _arg_lo(index: int) -> int:
    return 16 + 8 * index


def _arg_hi(index: int) -> int:
    return 20 + 8 * index


# x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl).
# fmt: off
ALLOWED = {
    "read": 0, "write": 1, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "poll": 7, "lseek": 8,
    "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12, "rt_sigaction": 13, "rt_sigprocmask": 14,
    "rt_sigreturn": 15, "pread64": 17, "readv": 19, "writev": 20, "access": 21, "pipe": 22,
    "select": 23, "sched_yield": 24, "mremap": 25, "msync": 26, "mincore": 27, "madvise": 28,
    "dup": 32, "dup2": 33, "pause": 34, "nanosleep": 35, "getitimer": 36, "alarm": 37,
    "setitimer": 38, "getpid": 39, "exit": 60, "wait4": 61, "uname": 63, "fcntl": 72,
    "getdents": 78, "getcwd": 79, "chdir": 80, "fchdir": 81, "readlink": 89, "umask": 95,
    "gettimeofday": 96, "getrlimit": 97, "getrusage": 98, "sysinfo": 99, "times": 100,
    "getuid": 102, "getgid": 104, "geteuid": 107, "getegid": 108, "getppid": 110, "getpgrp": 111,
    "getgroups": 115, "getresuid": 118, "getresgid": 120, "getpgid": 121, "getsid": 124,
    "capget": 125, "rt_sigpending": 127, "rt_sigtimedwait": 128, "rt_sigsuspend": 130,
    "sigaltstack": 131, "statfs": 137, "fstatfs": 138, "getpriority": 140, "sched_getparam": 143,
    "sched_getscheduler": 145, "sched_get_priority_max": 146, "sched_get_priority_min": 147,
    "sched_rr_get_interval": 148, "gettid": 186, "time": 201, "futex": 202,
    "sched_getaffinity": 204, "getdents64": 217, "set_tid_address": 218, "restart_syscall": 219,
    "fadvise64": 221, "timer_create": 222, "timer_settime": 223, "timer_gettime": 224,
    "timer_getoverrun": 225, "timer_delete": 226, "clock_gettime": 228, "clock_getres": 229,
    "clock_nanosleep": 230, "exit_group": 231, "epoll_wait": 232, "epoll_ctl": 233,
    "newfstatat": 262, "readlinkat": 267, "faccessat": 269, "pselect6": 270, "ppoll": 271,
    "set_robust_list": 273, "epoll_pwait": 281, "eventfd2": 290, "epoll_create1": 291, "dup3": 292,
    "pipe2": 293, "getcpu": 309, "sched_getattr": 315, "getrandom": 318, "membarrier": 324,
    "statx": 332, "rseq": 334, "close_range": 436, "faccessat2": 439, "epoll_pwait2": 441,
    "futex_waitv": 449, "futex_wake": 454, "futex_wait": 455, "futex_requeue": 456,
}
# fmt: on

KILLED = {
    # processes and programs
    "fork": 57,
    "vfork": 58,
    "execve": 59,
    "execveat": 322,
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "pidfd_open": 434,
    "pidfd_getfd": 438,
    "pidfd_send_signal": 424,
    "rt_sigqueueinfo": 129,
    "rt_tgsigqueueinfo": 297,
    "process_madvise": 440,
    # network
    "socket": 41,
    "connect": 42,
    "accept": 43,
    "sendto": 44,
    "sendmsg": 46,
    "bind": 49,
    "listen": 50,
    "socketpair": 53,
    "accept4": 288,
    "sendmmsg": 307,
    # files: creating, writing, deleting, renaming, changing metadata
    "creat": 85,
    "truncate": 76,
    "ftruncate": 77,
    "fallocate": 285,
    "rename": 82,
    "renameat": 264,
    "renameat2": 316,
    "mkdir": 83,
    "mkdirat": 258,
    "rmdir": 84,
    "link": 86,
    "linkat": 265,
    "unlink": 87,
    "unlinkat": 263,
    "symlink": 88,
    "symlinkat": 266,
    "chmod": 90,
    "fchmod": 91,
    "fchmodat": 268,
    "fchmodat2": 452,
    "chown": 92,
    "fchown": 93,
    "lchown": 94,
    "fchownat": 260,
    "mknod": 133,
    "mknodat": 259,
    "utime": 132,
    "utimes": 235,
    "futimesat": 261,
    "utimensat": 280,
    "setxattr": 188,
    "lsetxattr": 189,
    "fsetxattr": 190,
    "removexattr": 197,
    "lremovexattr": 198,
    "fremovexattr": 199,
    "openat2": 437,
    "open_by_handle_at": 304,
    "name_to_handle_at": 303,
    "pwrite64": 18,
    "pwritev": 296,
    "pwritev2": 328,
    "copy_file_range": 326,
    "sendfile": 40,
    "splice": 275,
    "memfd_create": 319,
    "memfd_secret": 447,
    # privileges, limits, namespaces, mounts
    "setuid": 105,
    "setgid": 106,
    "setreuid": 113,
    "setregid": 114,
    "setgroups": 116,
    "setresuid": 117,
    "setresgid": 119,
    "setfsuid": 122,
    "setfsgid": 123,
    "capset": 126,
    "setrlimit": 160,
    "unshare": 272,
    "setns": 308,
    "mount": 165,
    "umount2": 166,
    "chroot": 161,
    "pivot_root": 155,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "seccomp": 317,
    "landlock_create_ruleset": 444,
    "landlock_add_rule": 445,
    "landlock_restrict_self": 446,
    # kernel interfaces an ARC program has no use for
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "reboot": 169,
    "swapon": 167,
    "swapoff": 168,
    "sethostname": 170,
    "setdomainname": 171,
    "settimeofday": 164,
    "clock_settime": 227,
    "clock_adjtime": 305,
    "adjtimex": 159,
    "acct": 163,
    "quotactl": 179,
    "iopl": 172,
    "ioperm": 173,
    "syslog": 103,
    "vhangup": 153,
    "modify_ldt": 154,
    "fanotify_init": 300,
    "migrate_pages": 256,
    "move_pages": 279,
}

_NR_OPEN, _NR_OPENAT, _NR_CLONE, _NR_CLONE3 = 2, 257, 56, 435
_NR_KILL, _NR_TKILL, _NR_TGKILL, _NR_PRLIMIT64, _NR_IOCTL = 62, 200, 234, 302, 16

_O_WRITE_MASK = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000 | 0o20000000  # WRONLY RDWR CREAT TRUNC APPEND TMPFILE
_CLONE_THREAD = 0x00010000
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return (code, jt, jf, k & 0xFFFFFFFF)


def _ret(action: int) -> tuple[int, int, int, int]:
    return _ins(_RET, action)


def _all_equal_then_allow(conditions: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """Allow iff every (offset, value) word of the seccomp_data matches; else kill."""
    body: list[tuple[int, int, int, int]] = []
    n = len(conditions)
    for i, (offset, value) in enumerate(conditions):
        remaining_pairs = n - i - 1
        body.append(_ins(_LD_ABS, offset))
        # on mismatch jump over the remaining pairs and RET ALLOW, landing on RET KILL
        body.append(_ins(_JEQ, value, 0, 2 * remaining_pairs + 1))
    return body + [_ret(_RET_ALLOW), _ret(_RET_KILL)]


def _no_write_flags(arg: int) -> list[tuple[int, int, int, int]]:
    return [_ins(_LD_ABS, _arg_lo(arg)), _ins(_JSET, _O_WRITE_MASK, 0, 1), _ret(_RET_KILL), _ret(_RET_ALLOW)]


def _special_rules(pid: int) -> dict[int, list[tuple[int, int, int, int]]]:
    """System calls decided by their arguments; each block ends in a return."""
    own_pid = [(_arg_hi(0), 0), (_arg_lo(0), pid)]
    return {
        _NR_OPEN: _no_write_flags(1),
        _NR_OPENAT: _no_write_flags(2),
        # threads yes (CLONE_THREAD, no namespace flags), processes no
        _NR_CLONE: [
            _ins(_LD_ABS, _arg_lo(0)),
            _ins(_JSET, _CLONE_NAMESPACES, 2, 0),
            _ins(_JSET, _CLONE_THREAD, 0, 1),
            _ret(_RET_ALLOW),
            _ret(_RET_KILL),
        ],
        # clone3 passes its flags in memory the filter cannot read: ENOSYS makes glibc use clone
        _NR_CLONE3: [_ret(_RET_ERRNO | errno.ENOSYS)],
        _NR_KILL: _all_equal_then_allow(own_pid),
        _NR_TGKILL: _all_equal_then_allow(own_pid),
        _NR_TKILL: _all_equal_then_allow(own_pid),
        # getrlimit is prlimit64(0, resource, NULL, old): reading its own limits only
        _NR_PRLIMIT64: _all_equal_then_allow([(_arg_hi(0), 0), (_arg_lo(0), 0), (_arg_hi(2), 0), (_arg_lo(2), 0)]),
        _NR_IOCTL: [
            _ins(_LD_ABS, _arg_lo(1)),
            _ins(_JEQ, _TIOCSTI, 2, 0),
            _ins(_JEQ, _TIOCLINUX, 1, 0),
            _ret(_RET_ALLOW),
            _ret(_RET_KILL),
        ],
    }


def build_filter(pid: int) -> list[tuple[int, int, int, int]]:
    """The BPF program for a process with this pid (it may signal itself, nobody else).

    System call numbers are split into runs that share one decision (allow, kill, EPERM, or an
    argument check), tested in ascending order: about half the instructions of one test per number,
    which matters because the kernel compiles the filter again in every program's process.
    """
    special = _special_rules(pid)
    decision: dict[int, object] = dict.fromkeys(ALLOWED.values(), _RET_ALLOW)
    decision.update(dict.fromkeys(KILLED.values(), _RET_KILL))
    decision.update({nr: ("special", nr) for nr in special})
    top = max(decision) + 1
    runs: list[tuple[int, object]] = []  # (last number of the run, decision)
    for nr in range(top + 1):
        current = decision.get(nr, _RET_ERRNO | errno.EPERM) if nr < top else _RET_ERRNO | errno.EPERM
        if runs and runs[-1][1] == current and not isinstance(current, tuple):
            runs[-1] = (nr, current)
        else:
            runs.append((nr, current))
    prog = [
        _ins(_LD_ABS, _OFF_ARCH),
        _ins(_JEQ, AUDIT_ARCH_X86_64, 1, 0),
        _ret(_RET_KILL),
        _ins(_LD_ABS, _OFF_NR),
        _ins(_JGE, _X32_SYSCALL_BIT, 0, 1),
        _ret(_RET_KILL),
    ]
    for index, (last, current) in enumerate(runs):
        block = special[current[1]] if isinstance(current, tuple) else [_ret(current)]
        if index < len(runs) - 1:
            prog.append(_ins(_JGE, last + 1, len(block), 0))
        prog += block
    return prog


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported() -> str | None:
    """None if this machine can use the filter, else why not."""
    if platform.system() != "Linux":
        return f"seccomp needs Linux, this is {platform.system()}"
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the seccomp filter is written for x86-64, this is {platform.machine()}"
    return None


_PID_PLACEHOLDER = 0x7FFFFFFE  # no process has this pid (pid_max is at most 2**22)


class CompiledFilter:
    """The filter packed once in the worker; each child only writes its own pid into it."""

    def __init__(self) -> None:
        prog = build_filter(_PID_PLACEHOLDER)
        self.length = len(prog)
        self.raw = b"".join(struct.pack("=HBBI", *instruction) for instruction in prog)
        self.pid_offsets = [8 * i + 4 for i, ins in enumerate(prog) if ins[0] == _JEQ and ins[3] == _PID_PLACEHOLDER]
        if len(self.pid_offsets) != 3:
            raise AssertionError("the pid placeholder must appear once per kill/tkill/tgkill rule")

    def for_pid(self, pid: int) -> bytes:
        raw = bytearray(self.raw)
        packed = struct.pack("=I", pid)
        for offset in self.pid_offsets:
            raw[offset : offset + 4] = packed
        return bytes(raw)


def install(libc: ctypes.CDLL, pid: int, compiled: CompiledFilter | None = None) -> None:
    """Install the filter on the calling (single-threaded) process; raises OSError on failure."""
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    compiled = compiled or CompiledFilter()
    raw = compiled.for_pid(pid)
    buffer = ctypes.create_string_buffer(raw, len(raw))
    fprog = _SockFprog(compiled.length, ctypes.addressof(buffer))
    if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
