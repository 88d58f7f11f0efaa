"""Checks of a bundle file before it is loaded: kvrt reads a bundle JSON
file whole and dlopen maps a host shared object as its headers say, so a
FIFO or a device would block or never end, and a truncated shared object
would fault (SIGBUS) inside the loader, which no handler survives. These
checks refuse such files with an error instead (used by kvgen.Bundle).
"""

import os
import stat
import struct

from . import errors

# ELF identification and the headers' fields the check reads.
_ELF_MAGIC = b"\x7fELF"
_ELF_CLASSES = {1: (52, 32, "I"), 2: (64, 56, "Q")}
_PT_LOAD = 1
_ET_DYN = 3


def _refuse_special_file(path):
    """Raises BundleIOError for a FIFO, a device or a socket: reading one
    blocks or never ends (/dev/zero); InvalidArgumentError for a path with
    a NUL byte (kvrt would read the path cut at it). Missing files and
    folders are left to kvrt, which names them."""
    if "\0" in path:
        raise errors.InvalidArgumentError(
            "path: %r contains a NUL byte" % (path,))
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return
    kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if
            stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
            "not a regular file")
    raise errors.BundleIOError(
        "cannot read bundle '%s': it is %s, not a bundle file" % (path, kind))


def check_shared_object(path):
    """None if `path` is a regular file holding a whole ELF shared object
    (every program header, segment and section header table inside the
    file), else what is wrong, in words. A check of the layout only: what
    dlopen would map, so that a truncated or cut file is refused instead of
    faulting the process."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return "cannot open it: %s" % (e.strerror or e)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "it is not a regular file"
        size = st.st_size
        with os.fdopen(os.dup(fd), "rb") as f:
            head = f.read(64)
            if len(head) < 16 or head[:4] != _ELF_MAGIC:
                return "no ELF header"
            layout = _ELF_CLASSES.get(head[4])
            order = {1: "<", 2: ">"}.get(head[5])
            if layout is None or order is None:
                return "ELF class %d, data encoding %d" % (head[4], head[5])
            ehsize, phentsize, word = layout
            if size < ehsize or len(head) < ehsize:
                return "%d bytes, shorter than its ELF header" % size
            if word == "Q":
                (e_type, _, _, _, e_phoff, e_shoff, _, _, e_phentsize,
                 e_phnum, e_shentsize, e_shnum, _) = struct.unpack_from(
                     order + "HHIQQQIHHHHHH", head, 16)
            else:
                (e_type, _, _, _, e_phoff, e_shoff, _, _, e_phentsize,
                 e_phnum, e_shentsize, e_shnum, _) = struct.unpack_from(
                     order + "HHIIIIIHHHHHH", head, 16)
            if e_type != _ET_DYN:
                return "ELF type %d, not a shared object" % e_type
            if e_phentsize != phentsize or e_phnum == 0:
                return "no program headers"
            end = e_phoff + e_phnum * e_phentsize
            if end > size:
                return ("truncated: its program headers end at byte %d but "
                        "the file has %d bytes" % (end, size))
            if e_shoff and e_shoff + e_shnum * e_shentsize > size:
                return ("truncated: its section headers end at byte %d but "
                        "the file has %d bytes"
                        % (e_shoff + e_shnum * e_shentsize, size))
            f.seek(e_phoff)
            table = f.read(e_phnum * e_phentsize)
            for i in range(e_phnum):
                at = i * e_phentsize
                if word == "Q":
                    p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(
                        order + "IIQQQQ", table, at)
                else:
                    p_type, p_offset, _, _, p_filesz = struct.unpack_from(
                        order + "IIIII", table, at)
                if p_filesz and p_offset + p_filesz > size:
                    return ("truncated: its %s %d ends at byte %d but the "
                            "file has %d bytes" % (
                                "loadable segment" if p_type == _PT_LOAD
                                else "segment", i, p_offset + p_filesz,
                                size))
    except OSError as e:
        return "cannot read it: %s" % (e.strerror or e)
    finally:
        os.close(fd)
    return None
