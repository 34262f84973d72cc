#!/usr/bin/lua5.1
--[[
dac's dw_wlm_cli for Slurm's burst_buffer/datawarp plugin: the program GetSysState names.

slurmctld forks GetSysState for every call, with Cray's dw_wlm_cli arguments
(`--function <name> ...`). `job_process`, `pools` and `paths` run inside slurmctld under its
job lock: this script, started by a Lua interpreter in about a millisecond, asks dac's
answerer (dac-answerer, dacservice/answerer/) over its unix socket with lua-socket, prints
its stdout and stderr and exits with its status, byte for byte what `dacctl --function` would.
Every other function, and these three whenever lua-socket is missing, the socket absent, the
answerer refuses or is slower than DAC_ANSWERER_TIMEOUT, run `dacctl` with the very same
arguments (through `sh -c 'exec dacctl ...'`: Lua has no exec), so Slurm loses nothing.

Install it executable, as GetSysState (docs/slurm.md, burst_buffer/datawarp):
  install -m 0755 dw_wlm_cli.lua /usr/local/bin/dac_wlm_cli
Lua 5.1, 5.2, 5.3 and 5.4 run it alike, each with its own build of lua-socket. The first line
names Debian's and Ubuntu's Lua 5.1 (package lua5.1) itself, not through `/usr/bin/env`, whose
own exec costs as much as Lua's start; where another Lua is the one with lua-socket (RHEL,
Rocky, Alma: /usr/bin/lua, 5.3 on EL8, 5.4 on EL9 and later, with EPEL's lua-socket), edit
that line.

Environment, slurmctld's own (datawarp's calls inherit it):
  DACCTL               path of dacctl (default /usr/local/bin/dacctl)
  DAC_ANSWERER_SOCKET  the answerer's socket (default /run/dac-answerer/socket; "none": never ask)
  DAC_ANSWERER_TIMEOUT seconds to wait for its reply (default 0.5)
  DAC_SLURM_LOG        file that gets one line each time the answerer is passed over (optional)
--]]

local HOT = { job_process = true, pools = true, paths = true }

local function setting(name, default)
	local v = os.getenv(name)
	if v == nil or v == "" then
		return default
	end
	return v
end

local DACCTL = setting("DACCTL", "/usr/local/bin/dacctl")
local ANSWERER = setting("DAC_ANSWERER_SOCKET", "/run/dac-answerer/socket")
local TIMEOUT = tonumber(setting("DAC_ANSWERER_TIMEOUT", "0.5")) or 0.5

local function quote(s)
	return "'" .. string.gsub(s, "'", "'\\''") .. "'"
end

-- os.execute's result as the exit status a shell reports: the command's own, or 128 + the
-- signal that killed it. Lua 5.1 returns system()'s wait status (a number); 5.2 and later
-- true|nil, "exit"|"signal" and the code. A shell that could not be started is 127, which
-- glibc's system() itself reports for it to 5.1-5.3; 5.4 returns nil and the error instead.
local function exit_status(status, how, code)
	if type(status) == "number" then
		if status == -1 then
			return 127
		elseif status % 256 ~= 0 then -- killed by a signal
			return 128 + status % 128
		end
		return math.floor(status / 256)
	elseif how == "signal" then
		return 128 + code
	elseif how == "exit" then
		return code
	end
	return 127
end

-- dacctl with this process's own arguments; this process ends with its exit status.
local function exec_dacctl()
	local cmd = "exec " .. quote(DACCTL)
	for i = 1, #arg do
		cmd = cmd .. " " .. quote(arg[i])
	end
	io.stdout:flush()
	os.exit(exit_status(os.execute(cmd)))
end

local function note(why)
	local log = os.getenv("DAC_SLURM_LOG")
	local f = log and log ~= "" and io.open(log, "a")
	if f then
		f:write(string.format("dac_wlm_cli: answerer %s: %s; running dacctl --function %s\n",
			ANSWERER, tostring(why), tostring(arg[2])))
		f:close()
	end
end

local function encode(s)
	return (string.gsub(s, "[^%w%-%._/:=,]", function(c)
		return string.format("%%%02X", string.byte(c))
	end))
end

-- The answerer's reply: (exit status, stdout and stderr), or nil and why it gave none. One
-- request a connection, the reply read to the close that ends it. The same client as
-- burst_buffer.lua's `ask` (kept in step by hand: each file is installed alone, and Slurm
-- loads burst_buffer.lua afresh for every call, so a shared module would be one more file to
-- install and to compile per call).
local function ask(unix)
	local c, err = unix.stream()
	if c == nil then
		return nil, err
	end
	c:settimeout(TIMEOUT)
	local ok, reply, partial
	ok, err = c:connect(ANSWERER)
	if ok == nil then -- at once (absent, refused), or past the timeout with a full backlog
		c:close()
		return nil, err
	end
	-- a connected socket's age is the clock (socket.core's gettime, without loading it)
	local line = "dac-answer/1 " .. arg[2]
	for i = 3, #arg do
		line = line .. " " .. encode(arg[i])
	end
	ok, err = c:send(line .. "\n")
	if ok ~= nil then
		c:settimeout(math.max(0, TIMEOUT - select(3, c:getstats())))
		reply, err, partial = c:receive("*a")
	end
	c:close()
	if reply == nil then
		return nil, err
	end
	local status, n, rest = string.match(reply, "^ANSWER (%d+) (%d+)\n(.*)$")
	if status == nil then
		return nil, string.match(reply, "^REFUSE ([^\n]*)") or "no answer"
	end
	n = tonumber(n)
	if #rest < n then
		return nil, "a reply cut short"
	end
	return tonumber(status), { string.sub(rest, 1, n), string.sub(rest, n + 1) }
end

if arg[1] ~= "--function" or not HOT[arg[2]] or ANSWERER == "" or ANSWERER == "none" then
	exec_dacctl()
end
-- socket.unix is C: package.path (seven Lua paths, an open() each) is not searched
package.path = ""
local found, unix = pcall(require, "socket.unix")
if not found or type(unix) ~= "table" then
	note("no lua-socket")
	exec_dacctl()
end
local rc, out = ask(unix)
if rc == nil then
	if out ~= "No such file or directory" then -- no answerer installed: nothing to say
		note(out)
	end
	exec_dacctl()
end
io.stdout:write(out[1])
io.stderr:write(out[2])
os.exit(rc)
