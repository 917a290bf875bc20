"""A stand-in for ROCr's tool loading, for `kpatch run` tests (no GPU here).

Does what ROCr's Runtime::LoadTools does with HSA_TOOLS_LIB: splits it as
parse_tool_names does, dlopens each library, builds an HsaApiTable whose
CoreApiTable has recording stand-ins (layout from the hook's copy of
Debian's hsa_api_trace.h, field by field), calls OnLoad, then loads each
file given on the command line through
table->core_->hsa_code_object_reader_create_from_memory_fn as HIP does.
Prints one JSON object: {"onload": bool, "received": [{"file", "md5", "size"}]}
with the bytes the runtime's own entry received."""

import ctypes
import hashlib
import json
import os
import re
import sys

HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "kpatch", "delivery", "hook", "kpatch_hsa_table.h")


class WouldHang(ValueError):
    """ROCr's parse_tool_names never returns on this value."""


def tool_names(value: str) -> list[str]:
    """HSA_TOOLS_LIB as ROCr's parse_tool_names (src/core/runtime/runtime.cpp)
    splits it, step by step as that function does, written from its source and
    not from kpatch's parser (this is the oracle kpatch's parser is tested
    against).  It looks for the first of space, double quote, backslash:
    none: the rest joins the name, done; space outside quotes: the text before
    it joins the name, which is pushed (even when empty: two spaces give an
    empty name); space inside quotes: kept; opening quote: the text before it
    is DROPPED; closing quote: the text before it joins the name, which is
    pushed; backslash: the next character joins the name (a backslash as the
    last character is never consumed: ROCr loops forever).  At the end a
    non-empty name is pushed."""
    names: list[str] = []
    name, quoted, rest = "", False, value
    while rest:
        hits = [i for i in (rest.find(" "), rest.find('"'), rest.find("\\")) if i >= 0]
        if not hits:
            name += rest
            break
        i = min(hits)
        c, before = rest[i], rest[:i]
        if c == " " and not quoted:
            names.append(name + before)
            name, rest = "", rest[i + 1:]
        elif c == " ":
            name, rest = name + before + " ", rest[i + 1:]
        elif c == '"' and quoted:
            names.append(name + before)
            name, quoted, rest = "", False, rest[i + 1:]
        elif c == '"':
            quoted, rest = True, rest[i + 1:]
        elif i + 1 < len(rest):
            name, rest = name + before + rest[i + 1], rest[i + 2:]
        else:
            raise WouldHang(value)
    if name:
        names.append(name)
    return names


class Version(ctypes.Structure):
    _fields_ = [("major_id", ctypes.c_uint32), ("minor_id", ctypes.c_uint32), ("step_id", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


def core_fields() -> list[str]:
    text = open(HEADER).read()
    body = re.search(r"struct kp_core_api_table \{(.*?)\};", text, re.S).group(1)
    return re.findall(r"(\w+_fn)\s*;", body)


def main() -> int:
    fields = core_fields()

    class Core(ctypes.Structure):
        _fields_ = [("version", Version)] + [(f, ctypes.c_void_p) for f in fields]

    class Api(ctypes.Structure):
        _fields_ = [("version", Version), ("core_", ctypes.POINTER(Core)), ("amd_ext_", ctypes.c_void_p),
                    ("finalizer_ext_", ctypes.c_void_p), ("image_ext_", ctypes.c_void_p)]

    received = []
    FromMemory = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)

    def from_memory(ptr, size, reader):
        data = ctypes.string_at(ptr, size)
        received.append({"md5": hashlib.md5(data).hexdigest(), "size": size})
        return 0

    stand_in = FromMemory(from_memory)
    core = Core()
    core.version = Version(1, ctypes.sizeof(Core), 0, 0)
    core.hsa_code_object_reader_create_from_memory_fn = ctypes.cast(stand_in, ctypes.c_void_p).value
    api = Api()
    api.version = Version(1, ctypes.sizeof(Api), 0, 0)
    api.core_ = ctypes.pointer(core)
    onload = False
    for name in tool_names(os.environ.get("HSA_TOOLS_LIB", "")):
        lib = ctypes.CDLL(name, mode=ctypes.RTLD_LOCAL)
        fn = lib.OnLoad
        fn.restype = ctypes.c_bool
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
        onload = fn(ctypes.addressof(api), 0, 0, None) or onload
    entry = FromMemory(core.hsa_code_object_reader_create_from_memory_fn)
    for path in sys.argv[1:]:
        data = open(path, "rb").read()
        buf = ctypes.create_string_buffer(data, len(data))
        reader = ctypes.c_uint64(0)
        before = len(received)
        status = entry(ctypes.addressof(buf), len(data), ctypes.addressof(reader))
        if len(received) > before:
            received[-1]["file"] = path
        else:
            received.append({"file": path, "md5": None, "size": 0})
        received[-1]["status"] = status
    print(json.dumps({"onload": bool(onload), "received": received}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
