"""A process that publishes something named like the Python runtime's control memfd
(`tailprof_control`) that the recorder must refuse and never write (tests/python_attach.rs).

Usage: python3 python_attach_hostile.py MODE [UID]
  garbage  a 128-byte memfd full of 0xaa
  size     a valid control block in an 8192-byte memfd (the block may be at most 4096)
  owner    a valid control block in a memfd owned by UID (created with that euid), in a
           process that runs as root
Prints "ready", waits for a line on stdin, then "unchanged" or "written" (its memfd's bytes
compared with what it put there)."""
import mmap
import os
import struct
import sys

mode = sys.argv[1]
size = 8192 if mode == "size" else 128
if mode == "owner":
    os.seteuid(int(sys.argv[2]))
fd = os.memfd_create("tailprof_control", os.MFD_CLOEXEC)
if mode == "owner":
    os.seteuid(0)
os.ftruncate(fd, size)
mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
os.close(fd)
if mode == "garbage":
    mm[:] = b"\xaa" * size
else:
    struct.pack_into("<IIQ", mm, 0, 128, 1, 0)  # size, version, state off: a valid block
before = bytes(mm)
print("ready", flush=True)
sys.stdin.readline()
print("unchanged" if bytes(mm) == before else "written", flush=True)
