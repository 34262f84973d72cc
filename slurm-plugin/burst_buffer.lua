--[[
dac's burst_buffer.lua for Slurm's burst_buffer/lua plugin (Slurm 22.05 and later).

Install it as burst_buffer.lua next to slurm.conf. Every hook forwards to the same
`dacctl --function ...` argv that burst_buffer/datawarp uses, so both plugins share one contract.

Environment, inherited from the process that starts slurmctld, else read from
burst_buffer.env beside this file (KEY=VALUE lines; Slurm 24.11.0 and 24.11.1 start the hooks
with an empty environment):
  DACCTL          path of dacctl (default /usr/local/bin/dacctl)
  DAC_BBSTAT      path of dac-bbstat, for `scontrol show bbstat` (default /usr/local/bin/dac-bbstat)
  DAC_CONFIG      dac's config file, passed through to dacctl
  DAC_SLURM_LOG   file that receives dacctl's stderr (default /dev/null)
  DAC_ANSWERER_SOCKET  the answerer's socket (default /run/dac-answerer/socket; "none": never ask)
  DAC_ANSWERER_TIMEOUT seconds to wait for its reply (default 0.5)
  SLURM_CONF, PATH  passed through to dacctl when the environment lacks them

Why it is written this way:
  * Hooks take their fixed 22.05 arguments and then `...`: 23.02 appends uid, gid and a job_info
    table, and 24.05 requires slurm_bb_test_data_in/out; one file serves them all.
  * One source for Lua 5.1 to 5.4 (Debian's Slurm links 5.1, RHEL's 5.3 or 5.4): 5.3+ have no
    loadstring, and print a float as "9.0" (Slurm's numbers are floats there: slurm.SUCCESS,
    job_info's), so no number reaches dacctl as Lua prints it.
  * Lua 5.1 cannot read a command's exit status from io.popen, so the command prints
    "__rc=$?" last. No marker means the command was killed (Slurm's timeout SIGTERMs the
    process group); 22.05 would otherwise continue the job as if the stage had succeeded.
  * Arguments are single-quoted for the shell; no user text is ever interpreted by it.
  * From 24.11 a hook's stdout and stderr together are its answer (the user's message, the
    job's Reason): the shell's own stderr goes to /dev/null and dacctl's to DAC_SLURM_LOG, so
    only dacctl's one line on stdout is ever seen.
  * 23.02+ hands pre_run the job's nodes (job_info.nodes): dacctl gets them from there, never
    from an scontrol that might be another release than slurmctld.
  * get_status (`scontrol show bbstat`) asks the answerer too, and forks dac-bbstat only
    when it cannot answer: slurmctld holds its burst-buffer lock for the whole call, which
    every sbatch waits for (slurm_bb_get_status says why).
  * job_process, pools and paths run inside slurmctld under its job lock: they ask dac's
    answerer (dac-answerer, dacservice/answerer/) over its unix socket first, in this
    process, with lua-socket (Debian's lua-socket, for each Lua), which answers what dacctl would
    in well under a millisecond. When lua-socket is missing, the socket absent, the answerer
    refuses or is slower than DAC_ANSWERER_TIMEOUT, they fork dacctl as every other hook does,
    with what is left of 2 s (DAC_HOT_TIMEOUT). pools, paths and job_process first read the
    answer the answerer keeps in a file beside its socket (pools_file, paths_file and
    valid_file below), and ask only when there is none to believe.
  * Slurm loads this file into a fresh Lua state for every call (burst_buffer_lua.c), inside
    the time slurmctld reports for a hook, so the three in-process hooks pay for loading all of
    it on every sbatch (docs/performance.md, "as slurmctld times them"). So: burst_buffer.env
    is read only when the environment lacks a setting; of lua-socket only socket.unix is
    loaded (its socket's age is the clock), searched for on package.cpath alone, and left
    mapped when the state closes, so the next call neither maps nor relocates it again; and
    the half of this file that forks (FORKING: every other hook, and the fallback) is a string
    compiled only when a hook forks, which none of the answered calls does.
--]]

-- What burst_buffer.env beside this file (or beside slurm.conf) says: KEY=VALUE lines, read
-- at the first setting the environment lacks.
local fallback

local function env_file()
	if fallback == nil then
		fallback = {}
		local source = debug and debug.getinfo and debug.getinfo(1, "S").source or ""
		local dir = string.match(source, "^@(.*)/[^/]*$")
			or string.match(os.getenv("SLURM_CONF") or "", "^(.*)/[^/]*$") or "/etc/slurm"
		local f = io.open(dir .. "/burst_buffer.env", "r")
		if f ~= nil then
			for line in f:lines() do
				local k, v = string.match(line, "^([A-Z_][A-Z0-9_]*)=(.*)$")
				if k ~= nil then
					fallback[k] = v
				end
			end
			f:close()
		end
	end
	return fallback
end

local function setting(name, default)
	local v = os.getenv(name)
	if v == nil or v == "" then
		v = env_file()[name]
	end
	if v == nil or v == "" then
		return default
	end
	return v
end

-- An exit status and stdout as Slurm wants them: slurm.SUCCESS or slurm.ERROR, and the text.
local function finish(what, rc, body)
	body = string.gsub(body, "%s+$", "")
	if tonumber(rc) ~= 0 then
		slurm.log_info("dac: %s failed (exit %s): %s", what, rc, body)
		if body == "" then
			body = "dac: " .. what .. " failed with exit code " .. rc
		end
		return slurm.ERROR, body
	end
	return slurm.SUCCESS, body
end

-- Every hook that forks, and dacctl for the answered three when the answerer cannot answer:
-- compiled by fork() at the first call that needs it, with this file's name and line numbers.
-- It gets setting, env_file and finish, and returns its functions.
local FORKING_LINE = debug.getinfo(1, "l").currentline
local FORKING = [==[
local setting, env_file, finish = ...
local DACCTL = setting("DACCTL", "/usr/local/bin/dacctl")
local DAC_BBSTAT = setting("DAC_BBSTAT", "/usr/local/bin/dac-bbstat")
local LOG = setting("DAC_SLURM_LOG", "/dev/null")
local forking = {}

local function quote(s)
	return "'" .. string.gsub(tostring(s), "'", "'\\''") .. "'"
end

-- What dacctl must be given when the environment lacks it: "K='v' K2='v2' " or "".
local PASS_ENV = ""
for _, k in ipairs({ "DAC_CONFIG", "SLURM_CONF", "PATH" }) do
	if (os.getenv(k) == nil or os.getenv(k) == "") and env_file()[k] ~= nil then
		PASS_ENV = PASS_ENV .. k .. "=" .. quote(env_file()[k]) .. " "
	end
end

-- Run a shell command line; returns slurm.SUCCESS or slurm.ERROR, and its stdout.
local function run(what, cmd)
	-- umask 077: DAC_SLURM_LOG, made by the redirection below if missing, names other users'
	-- paths and errors, so it is SlurmUser's alone (0600)
	local pipe = io.popen("exec 2>/dev/null; umask 077; " .. cmd .. "; echo __rc=$?")
	if pipe == nil then
		return slurm.ERROR, "dac: cannot run " .. DACCTL
	end
	local out = pipe:read("*a") or ""
	pipe:close()
	local body, rc = string.match(out, "^(.-)__rc=(%d+)%s*$")
	if rc == nil then
		slurm.log_error("dac: %s was killed before it finished", what)
		return slurm.ERROR, "dac: " .. what .. " was killed before it finished"
	end
	return finish(what, rc, body)
end

-- dacctl --function <fn> <args...>, its stderr to DAC_SLURM_LOG; `env`: "K='v' " words.
function forking.dacctl(fn, args, env)
	local cmd = PASS_ENV .. (env or "") .. quote(DACCTL) .. " --function " .. quote(fn)
	for _, a in ipairs(args) do
		cmd = cmd .. " " .. quote(a)
	end
	return run(fn, cmd .. " 2>>" .. quote(LOG))
end
local dacctl = forking.dacctl

function forking.slurm_bb_job_teardown(job_id, job_script, hurry, ...)
	local args = { "--token", job_id, "--job", job_script }
	if hurry == "true" then
		table.insert(args, "--hurry")
	end
	return dacctl("teardown", args)
end

function forking.slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script, ...)
	return dacctl("setup", { "--token", job_id, "--caller", "SLURM", "--user", uid,
		"--groupid", gid, "--capacity", tostring(pool) .. ":" .. tostring(bb_size),
		"--job", job_script })
end

function forking.slurm_bb_data_in(job_id, job_script, ...)
	return dacctl("data_in", { "--token", job_id, "--job", job_script })
end

function forking.slurm_bb_real_size(job_id, ...)
	local rc, out = dacctl("real_size", { "--token", job_id })
	if rc ~= slurm.SUCCESS then
		return rc, out
	end
	return slurm.SUCCESS, string.match(out, '"capacity":%s*(%d+)') or "0"
end

-- 23.02+: (job_id, job_script, uid, gid, job_info), job_info.nodes the allocated nodes.
function forking.slurm_bb_pre_run(job_id, job_script, uid, gid, job_info)
	local args = { "--token", job_id, "--job", job_script }
	if type(job_info) == "table" and type(job_info.nodes) == "string" and job_info.nodes ~= "" then
		table.insert(args, "--nodes")
		table.insert(args, job_info.nodes)
	end
	return dacctl("pre_run", args)
end

function forking.slurm_bb_post_run(job_id, job_script, ...)
	return dacctl("post_run", { "--token", job_id, "--job", job_script })
end

function forking.slurm_bb_data_out(job_id, job_script, ...)
	return dacctl("data_out", { "--token", job_id, "--job", job_script })
end

-- `scontrol show bbstat [job | view]` forked: dac-bbstat, read-only, which accepts at most a
-- job id or a dwstat view name (that job's buffer in one line; the view, the pools by default,
-- in Cray's dwstat layout). Whatever else a user types is refused there, never passed to
-- dacctl. `caller` (slurm_bb_get_status below: "<uid>:<gid>" or "") goes in its environment
-- (a user cannot set slurmctld's): the full line, errors included, only for the buffer's
-- owner, root and admin_group.
function forking.bbstat(caller, args)
	local cmd = PASS_ENV .. "DAC_BBSTAT_CALLER=" .. quote(caller) .. " " .. quote(DAC_BBSTAT)
	for _, a in ipairs(args) do
		cmd = cmd .. " " .. quote(a)
	end
	-- its one line (a usage or an error) is for the user: Slurm shows only its own on ERROR
	local _, out = run("bbstat", cmd .. " 2>>" .. quote(LOG))
	return slurm.SUCCESS, out
end

return forking
]==]
local forking

local function fork()
	if forking == nil then
		local chunk = string.rep("\n", FORKING_LINE) .. FORKING
		local compile = loadstring or load -- 5.1's load takes no string; 5.3+ have no loadstring
		forking = assert(compile(chunk, debug.getinfo(1, "S").source))(setting, env_file, finish)
	end
	return forking
end

-- what slurmctld waits at most for a hook it runs itself, answerer and fork together
local HOT_BUDGET = 2.0

local function encode(s)
	return (string.gsub(tostring(s), "[^%w%-%._/:=,]", function(c)
		return string.format("%%%02X", string.byte(c))
	end))
end

-- Where Lua 5.3 keeps its C libraries' handles: a table in the registry under a C address (5.1
-- names their metatable _LOADLIB, 5.2 and 5.4 their table _CLIBS), the one whose first entry
-- is a handle. A string, compiled on 5.3 alone when lua_socket needs it, as FORKING is.
local CLIBS_53 = [[
for k, v in pairs(...) do
	if type(k) == "userdata" and type(v) == "table" and type(v[1]) == "userdata" then
		return v
	end
end
]]

-- lua-socket's socket.unix, or nil. A C module, so package.path (seven Lua paths, an open()
-- each) is not searched. Its closer loses its __gc: the library stays mapped when this state
-- closes, and the next call's dlopen finds it loaded instead of mapping and relocating it,
-- 0.1-0.2 ms inside slurmctld (docs/performance.md).
local function lua_socket()
	local path = package.path
	package.path = ""
	local ok, unix = pcall(require, "socket.unix")
	package.path = path
	-- the closer: what dlcloses this state's C libraries at lua_close, 5.1's handles' metatable,
	-- 5.2+'s their table's
	local registry = debug.getregistry()
	local closer = registry._LOADLIB
		or getmetatable(registry._CLIBS or (loadstring or load)(CLIBS_53)(registry))
	if closer ~= nil then
		closer.__gc = nil
	end
	return ok and type(unix) == "table" and unix or nil
end

-- The answerer's reply: (exit status, stdout), or nil and why it gave none; and the seconds
-- it took. One request a connection, the reply read to the close that ends it. dw_wlm_cli.lua
-- has the same client, kept in step by hand: a module both load would be one more file to
-- install beside each, and one more to open and compile in every call here.
local function ask(unix, socket, timeout, fn, args, script, word)
	local c, err = unix.stream()
	if c == nil then
		return nil, err, 0
	end
	c:settimeout(timeout)
	local ok, reply, partial
	ok, err = c:connect(socket)
	if ok == nil then -- at once (absent, refused), or past the timeout with a full backlog
		c:close()
		return nil, err, err == "timeout" and timeout or 0
	end
	-- a connected socket's age is the clock (socket.core's gettime, without loading it)
	local line = "dac-answer/1 " .. fn
	if script ~= nil then -- its bytes follow the line (the answerer's wire.py, /2)
		line = "dac-answer/2 " .. fn .. " script:" .. #script
	elseif word ~= nil then
		line = "dac-answer/2 " .. fn .. " " .. word
	end
	for _, a in ipairs(args) do
		line = line .. " " .. encode(a)
	end
	ok, err = c:send(script and (line .. "\n" .. script) or (line .. "\n"))
	if ok ~= nil then
		c:settimeout(math.max(0, timeout - select(3, c:getstats())))
		reply, err, partial = c:receive("*a")
	end
	c:close()
	local took = select(3, c:getstats())
	if reply == nil then
		return nil, err, took
	end
	local status, n, rest = string.match(reply, "^ANSWER (%d+) (%d+)\n(.*)$")
	if status == nil then
		return nil, string.match(reply, "^REFUSE ([^\n]*)") or "no answer", took
	end
	if #rest < tonumber(n) then
		return nil, "a reply cut short", took
	end
	return status, string.sub(rest, 1, tonumber(n)), took
end

-- `out` into slurmctld's own path file, which Slurm made empty; false when it is missing
-- (24.11+: a job array's task whose directory Slurm never made, which dacctl makes) or not
-- empty (Lua cannot cut it short). Opened without O_TRUNC: an empty file truncated again is
-- flushed to disk at its close (ext4's auto_da_alloc), 10-36 ms under a burst of job starts.
local function write_pathfile(path, out)
	local f = io.open(path, "r+b")
	if f == nil then
		return false
	end
	if f:seek("end") ~= 0 then
		f:close()
		return false
	end
	local ok = f:write(out)
	return f:close() and ok ~= nil
end

-- job_process, pools, paths: the answerer's answer, else dacctl's (the header says why).
-- `pathfile`: paths's, whose lines the answerer replies (reply:pathfile) and this writes.
local function hot(fn, args, script, pathfile)
	local socket = setting("DAC_ANSWERER_SOCKET", "/run/dac-answerer/socket")
	local unix = socket ~= "none" and lua_socket()
	if not unix then
		return fork().dacctl(fn, args) -- turned off, or no lua-socket: the fork, as before
	end
	local timeout = tonumber(setting("DAC_ANSWERER_TIMEOUT", "0.5")) or 0.5
	local rc, out, took = ask(unix, socket, timeout, fn, args, script, pathfile and "reply:pathfile")
	if rc ~= nil and pathfile ~= nil and tonumber(rc) == 0 then
		if write_pathfile(pathfile, out) then
			return finish(fn, rc, "")
		end
		local more -- the answerer writes it, making what is missing, as dacctl does
		rc, out, more = ask(unix, socket, math.max(0, timeout - took), fn, args)
		took = took + more
	end
	if rc ~= nil then
		return finish(fn, rc, out)
	end
	if out ~= "No such file or directory" then -- the answerer is not installed: nothing to say
		slurm.log_info("dac: answerer %s: %s; forking dacctl", socket, tostring(out))
	end
	local left = math.max(0.1, HOT_BUDGET - took)
	return fork().dacctl(fn, args, string.format("DAC_HOT_TIMEOUT=%.3f ", left))
end

-- the largest job script sent to the answerer with job_process (its wire.py's MAX_SCRIPT); a
-- larger one the answerer reads from its path
local MAX_SCRIPT = 65536

-- The pools answer the answerer keeps in a file beside its socket
-- (dacservice/answerer/publisher.py, "the pools file"): (exit status, stdout), or nil when
-- there is none to believe. Read, not asked: Slurm calls pools every 30 s, so every call found
-- the answerer idle, and the round trip was most of the hook's time. Believed while its expiry
-- (whole seconds) is 1-2 s ahead of the clock (publisher.py's POOLS_GOOD_FOR + 1): a file left
-- by a stopped answerer is not.
local function pools_file(socket)
	local f = io.open((string.gsub(socket, "[^/]*$", "")) .. "pools", "rb")
	if f == nil then
		return nil
	end
	local data = f:read("*a") or ""
	f:close()
	local expires, rc, n, rest = string.match(data, "^dac%-pools/1 (%d+) (%d+) (%d+)\n(.*)$")
	local left = expires and tonumber(expires) - os.time()
	if left == nil or left <= 0 or left > 2 or #rest ~= tonumber(n) then
		return nil
	end
	return rc, rest
end

-- The name of the valid file of a request's words and script
-- (dacservice/answerer/published.py, valid_name, which a test holds this to): the words, the
-- length and 64 evenly spaced bytes.
local function valid_name(words, script)
	local P, h = 4294967291, 0
	for i = 1, #words do
		h = (h * 31 + string.byte(words, i)) % P
	end
	local n = #script
	h = (h * 31 + n) % P
	for i = 1, n, math.max(1, math.floor(n / 64)) do
		h = (h * 31 + string.byte(script, i)) % P
	end
	return string.format("%08x", h)
end

-- Whether the answerer keeps this very request (its words but --job's, and its script) as
-- valid, in its valid file (dacservice/answerer/published.py, "the valid files"), believed
-- only while the pools file is: then job_process is answered without waking the answerer.
local function valid_file(socket, words, script)
	if pools_file(socket) == nil then
		return false
	end
	local dir = string.gsub(socket, "[^/]*$", "")
	local f = io.open(dir .. "valid/" .. valid_name(words, script), "rb")
	if f == nil then
		return false
	end
	local data = f:read("*a") or ""
	f:close()
	local w, n, rest = string.match(data, "^dac%-valid/1 (%d+) (%d+)\n(.*)$")
	return w ~= nil and tonumber(w) == #words and tonumber(n) == #script and rest == words .. script
end

-- 23.02+ passes uid, gid as the first varargs of job_process; 22.05 passes nothing. The script
-- (slurmctld's own file) is read here and sent with the request: the answerer then opens no
-- file, and keeps a valid answer by its bytes, so the same script again skips the checks, and
-- once in its valid file, the round trip too.
function slurm_bb_job_process(job_script, uid, ...)
	local args = { "--job", job_script }
	local words = ""
	if type(uid) == "string" and string.match(uid, "^%d+$") then
		table.insert(args, "--user")
		table.insert(args, uid)
		words = "--user " .. uid
	end
	local script
	local f = io.open(job_script, "rb")
	if f ~= nil then
		script = f:read(MAX_SCRIPT + 1)
		f:close()
		if script ~= nil and #script > MAX_SCRIPT then
			script = nil
		end
	end
	local socket = setting("DAC_ANSWERER_SOCKET", "/run/dac-answerer/socket")
	if script ~= nil and socket ~= "none" and valid_file(socket, words, script) then
		return finish("job_process", 0, "")
	end
	return hot("job_process", args, script)
end

function slurm_bb_pools(...)
	local socket = setting("DAC_ANSWERER_SOCKET", "/run/dac-answerer/socket")
	if socket ~= "none" then
		local rc, out = pools_file(socket)
		if rc ~= nil then
			return finish("pools", rc, out)
		end
	end
	return hot("pools", {})
end

-- The job's paths answer the answerer keeps beside its socket
-- (dacservice/answerer/published.py, "the paths files"): the path file's text, or nil when
-- there is none to believe. Read, not asked: paths runs as each job starts, beside the other
-- jobs' starts and forks, where waking the answerer was most of its time. Believed only while
-- the pools file is (the answerer's mirror confirmed current); a job without one (no buffer of
-- its own) asks.
local function paths_file(socket, job_id)
	if type(job_id) ~= "string" or not string.match(job_id, "^%d+$") or #job_id > 10 then
		return nil
	end
	if pools_file(socket) == nil then
		return nil
	end
	local f = io.open((string.gsub(socket, "[^/]*$", "")) .. "paths/" .. job_id, "rb")
	if f == nil then
		return nil
	end
	local data = f:read("*a") or ""
	f:close()
	local n, text = string.match(data, "^dac%-paths/1 (%d+)\n(.*)$")
	if n == nil or #text ~= tonumber(n) then
		return nil
	end
	return text
end

-- 23.02+: (job_id, job_script, path_file, uid, gid, job_info). A job array's task: the array's
-- id, which paths (inside slurmctld, so no scontrol) needs on 24.11+ to find the script Slurm
-- never wrote for the task (daccore/services/slurm_args.py).
function slurm_bb_paths(job_id, job_script, path_file, uid, gid, job_info)
	local socket = setting("DAC_ANSWERER_SOCKET", "/run/dac-answerer/socket")
	if socket ~= "none" then
		local text = paths_file(socket, job_id)
		if text ~= nil and write_pathfile(path_file, text) then
			return finish("paths", 0, "")
		end
	end
	local args = { "--token", job_id, "--job", job_script, "--pathfile", path_file }
	local array = type(job_info) == "table" and tonumber(job_info.array_job_id) or nil
	if array ~= nil and array > 0 and array ~= tonumber(job_id) then
		table.insert(args, "--array-job")
		table.insert(args, string.format("%d", array))
	end
	return hot("paths", args, nil, path_file)
end

-- `scontrol show bbstat [job | view]`: what dac-bbstat prints (FORKING's bbstat), asked of
-- the answerer in this process, dac-bbstat forked only when it cannot answer. slurmctld holds
-- its burst-buffer plugin lock for the whole call (bb_g_get_status, src/interfaces/
-- burst_buffer.c; src/slurmctld in 22.05), and every sbatch, even one without a buffer, takes
-- that lock under the job write lock (_job_create's bb_g_job_validate): a Python started per
-- call was what every other RPC waited for during a loop of them (issue 45). 23.02+ puts the
-- caller's uid and gid first; 22.05 passes only what the user typed, so two numbers there are
-- the user's words, not an identity: it is told apart by the error table 23.02 added to the
-- `slurm` module (slurm.ESLURM_BURST_BUFFER_PERMISSION). An empty word is sent as NUL, which
-- no argv holds (a line cannot carry an empty last word); the answerer takes it back.
function slurm_bb_get_status(...)
	local args, caller = { ... }, ""
	if slurm.ESLURM_BURST_BUFFER_PERMISSION ~= nil then
		local uid, gid = tostring(table.remove(args, 1)), tostring(table.remove(args, 1))
		if string.match(uid, "^%d+$") and string.match(gid, "^%d+$") then
			caller = uid .. ":" .. gid
		end
	end
	local socket = setting("DAC_ANSWERER_SOCKET", "/run/dac-answerer/socket")
	local unix = socket ~= "none" and lua_socket()
	if unix then
		local words = {}
		for i, a in ipairs(args) do
			words[i] = a == "" and "\0" or a
		end
		local timeout = tonumber(setting("DAC_ANSWERER_TIMEOUT", "0.5")) or 0.5
		local rc, out = ask(unix, socket, timeout, "bbstat", words, nil, "caller:" .. caller)
		if rc ~= nil and tonumber(rc) == 0 then
			return finish("bbstat", rc, out)
		end
		if out ~= "No such file or directory" then -- the answerer is not installed
			slurm.log_info("dac: answerer %s: %s; forking dac-bbstat", socket,
				rc and "exit " .. rc or tostring(out))
		end
	end
	return fork().bbstat(caller, args)
end

-- data_in returns only when the data is in, so there is never anything to poll (24.05+).
function slurm_bb_test_data_in(job_id, job_script, ...)
	return slurm.SUCCESS, ""
end

function slurm_bb_test_data_out(job_id, job_script, ...)
	return slurm.SUCCESS, ""
end

-- The hooks that fork dacctl: FORKING's, each a global Slurm finds at load (one closure
-- compiled for all of them)
for _, name in ipairs({ "slurm_bb_job_teardown", "slurm_bb_setup", "slurm_bb_data_in",
	"slurm_bb_real_size", "slurm_bb_pre_run", "slurm_bb_post_run", "slurm_bb_data_out" }) do
	_G[name] = function(...)
		return fork()[name](...)
	end
end
