"""slurmctld's burst_buffer/lua as far as Lua can tell, in ctypes: each call in a fresh Lua state
of the liblua named (luaL_newstate, luaL_openlibs), the script loaded (luaL_loadfile), the
`slurm` table set, the script run, the hook called with Slurm's string arguments (and a
job_info table, 23.02+), its status read with lua_tonumber and its message with lua_tostring,
then lua_close: src/plugins/burst_buffer/lua/burst_buffer_lua.c (_start_lua_script) and
src/lua/slurm_lua.c (slurm_lua_loadscript). Run as a process of its own, one liblua in it,
loaded RTLD_GLOBAL as Slurm loads it, so that lua-socket's C modules find its symbols.

    python lua_host.py <liblua.so> <script> <calls.json>

calls.json: {"slurm": Lua source that sets the global `slurm` (lua_answerer.SLURM_TABLE),
"calls": [{"hook": name, "args": [str, ...], "job_info": Lua expression or null}, ...]}.
Prints one JSON line a call: {"rc": the status or null, "out": the message or null, "error":
Lua's error or null, "ms": the whole call, newstate to close, "hook_ms": the hook's lua_pcall,
"left": files mapped after this call's lua_close that were not before the first call}.
"""

import ctypes
import json
import os
import sys
import time

LUA_MULTRET = -1
LUA_GLOBALSINDEX = -10002  # Lua 5.1's pseudo-index of the globals (5.2+: lua_getglobal)


def _mapped() -> set[str]:
    with open("/proc/self/maps") as f:
        return {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}


class Lua:
    """The few calls of the C API Slurm makes, on one liblua (5.1's or 5.2+'s names)."""

    def __init__(self, path: str):
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        self.lib, self.v51 = lib, not hasattr(lib, "lua_pcallk")
        p, i, s = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
        for name, res, args in (
            ("luaL_newstate", p, []),
            ("luaL_openlibs", None, [p]),
            ("luaL_loadstring", i, [p, s]),
            ("lua_pushstring", p, [p, s]),
            ("lua_settop", None, [p, i]),
            ("lua_gettop", i, [p]),
            ("lua_isnumber", i, [p, i]),
            ("lua_isstring", i, [p, i]),
            ("lua_tolstring", p, [p, i, ctypes.POINTER(ctypes.c_size_t)]),
            ("lua_close", None, [p]),
        ):
            getattr(lib, name).restype, getattr(lib, name).argtypes = res, args
        if self.v51:
            lib.luaL_loadfile.restype, lib.luaL_loadfile.argtypes = i, [p, s]
            lib.lua_pcall.restype, lib.lua_pcall.argtypes = i, [p, i, i, i]
            lib.lua_getfield.restype, lib.lua_getfield.argtypes = None, [p, i, s]
            lib.lua_tonumber.restype, lib.lua_tonumber.argtypes = ctypes.c_double, [p, i]
        else:  # the 5.1 names are macros here
            lib.luaL_loadfilex.restype, lib.luaL_loadfilex.argtypes = i, [p, s, s]
            # lua_KContext: int on 5.2, intptr_t on 5.3+; 0 either way
            lib.lua_pcallk.restype, lib.lua_pcallk.argtypes = i, [p, i, i, i, ctypes.c_ssize_t, p]
            lib.lua_getglobal.argtypes = [p, s]
            lib.lua_tonumberx.restype = ctypes.c_double
            lib.lua_tonumberx.argtypes = [p, i, p]

    def loadfile(self, L: int, path: str) -> int:
        if self.v51:
            return self.lib.luaL_loadfile(L, path.encode())
        return self.lib.luaL_loadfilex(L, path.encode(), None)

    def pcall(self, L: int, nargs: int, nresults: int) -> int:
        if self.v51:
            return self.lib.lua_pcall(L, nargs, nresults, 0)
        return self.lib.lua_pcallk(L, nargs, nresults, 0, 0, None)

    def getglobal(self, L: int, name: str) -> None:
        if self.v51:
            self.lib.lua_getfield(L, LUA_GLOBALSINDEX, name.encode())
        else:
            self.lib.lua_getglobal(L, name.encode())

    def tonumber(self, L: int, index: int) -> float:
        if self.v51:
            return self.lib.lua_tonumber(L, index)
        return self.lib.lua_tonumberx(L, index, None)

    def tostring(self, L: int, index: int) -> str:
        n = ctypes.c_size_t()
        at = self.lib.lua_tolstring(L, index, ctypes.byref(n))
        return ctypes.string_at(at, n.value).decode(errors="replace")

    def run(self, L: int, source: str, nresults: int = 0) -> None:
        if self.lib.luaL_loadstring(L, source.encode()) or self.pcall(L, 0, nresults):
            raise RuntimeError(self.tostring(L, -1))


def call(lua: Lua, script: str, slurm: str, hook: str, args: list[str], job_info) -> dict:
    """One call as slurmctld makes it: {"rc", "out", "error", "ms", "hook_ms"}."""
    result: dict = {"rc": None, "out": None, "error": None, "hook_ms": None}
    start = time.perf_counter()
    L = lua.lib.luaL_newstate()
    try:
        lua.lib.luaL_openlibs(L)
        if lua.loadfile(L, script):
            raise RuntimeError(lua.tostring(L, -1))
        lua.run(L, slurm)  # the chunk waits on the stack while Slurm builds its table
        if lua.pcall(L, 0, 1):
            raise RuntimeError(lua.tostring(L, -1))
        lua.lib.lua_settop(L, 0)
        lua.getglobal(L, hook)
        for a in args:
            lua.lib.lua_pushstring(L, a.encode())
        if job_info is not None:
            lua.run(L, f"return {job_info}", 1)
        hook_start = time.perf_counter()
        failed = lua.pcall(L, len(args) + (job_info is not None), LUA_MULTRET)
        result["hook_ms"] = (time.perf_counter() - hook_start) * 1000
        if failed:
            raise RuntimeError(lua.tostring(L, -1))
        top = lua.lib.lua_gettop(L)
        if top >= 1 and lua.lib.lua_isnumber(L, 1):
            result["rc"] = lua.tonumber(L, 1)
        if top >= 2 and lua.lib.lua_isstring(L, 2):
            result["out"] = lua.tostring(L, 2)
    except RuntimeError as e:
        result["error"] = str(e)
    finally:
        lua.lib.lua_close(L)
    result["ms"] = (time.perf_counter() - start) * 1000
    return result


def main() -> int:
    liblua, script, calls_file = sys.argv[1:4]
    with open(calls_file) as f:
        spec = json.load(f)
    lua = Lua(liblua)
    before = _mapped()
    for c in spec["calls"]:
        result = call(lua, script, spec["slurm"], c["hook"], c["args"], c.get("job_info"))
        result["left"] = sorted(_mapped() - before)
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
