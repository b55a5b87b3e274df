"""The compiled seccomp program, run in a small BPF interpreter, decides every system call as the
rule tables say (the kernel-level tests in test_hostile.py check it on the real kernel)."""

from __future__ import annotations

import errno
import struct

import pytest

from arc_pipeline.sandbox import seccomp

ALLOW, KILL = 0x7FFF0000, 0x80000000
EPERM, ENOSYS = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
PID = 4242


def run_bpf(prog, nr: int, args: list[int], arch: int = seccomp.AUDIT_ARCH_X86_64) -> int:
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


def expected(nr: int, args: list[int]) -> int:
    if nr in (2, 257):  # open, openat: no write/create/truncate/append flags
        flags = args[1 if nr == 2 else 2] & 0xFFFFFFFF
        return KILL if flags & 0o20003103 else ALLOW
    if nr == 56:  # clone: threads only
        flags = args[0] & 0xFFFFFFFF
        return ALLOW if flags & 0x10000 and not flags & 0x7E020000 else KILL
    if nr == 435:
        return ENOSYS
    if nr in (62, 200, 234):
        return ALLOW if args[0] == PID else KILL
    if nr == 302:
        return ALLOW if args[0] == 0 and args[2] == 0 else KILL
    if nr == 16:
        return KILL if args[1] & 0xFFFFFFFF in (0x5412, 0x541C) else ALLOW
    if nr in seccomp.ALLOWED.values():
        return ALLOW
    if nr in seccomp.KILLED.values():
        return KILL
    return EPERM


ARG_PATTERNS = [
    [0] * 6,
    [PID, 0, 0, 0, 0, 0],
    [PID + (1 << 32), 9, 0, 0, 0, 0],
    [1, 0o2, 0o1, 0, 0, 0],
    [0x10000 | 0x100, 0x5412, 0o100, 0, 0, 0],
    [0x10000 | 0x40000000, 0x541C, 0o1000 | 0o2, 0, 0, 0],
    [0, 0, 0x7FF, 0, 0, 0],
    [0, 0, 1 << 32, 0, 0, 0],
    [(1 << 64) - 1] * 6,
]


def test_rule_tables_do_not_overlap():
    assert not set(seccomp.ALLOWED.values()) & set(seccomp.KILLED.values())


@pytest.mark.parametrize("args", ARG_PATTERNS)
def test_every_system_call_gets_the_tabled_decision(args):
    prog = seccomp.build_filter(PID)
    assert len(prog) < 4096
    for nr in range(520):
        assert run_bpf(prog, nr, args) == expected(nr, args), (nr, args)


def test_foreign_architecture_and_x32_are_killed():
    prog = seccomp.build_filter(PID)
    assert run_bpf(prog, 0, [0] * 6, arch=0x40000003) == KILL  # i386
    assert run_bpf(prog, 0x40000000 + 1, [0] * 6) == KILL


def test_compiled_filter_patches_the_pid():
    compiled = seccomp.CompiledFilter()
    packed = b"".join(struct.pack("=HBBI", *ins) for ins in seccomp.build_filter(PID))
    assert compiled.for_pid(PID) == packed
