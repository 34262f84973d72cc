#!/usr/bin/lua5.1
--[[
dac's dwstat for Slurm's burst_buffer/datawarp plugin: the program GetSysStatus names.

`scontrol show bbstat <words>` and `scontrol show dwstat <words>` make slurmctld fork
GetSysStatus with any user's words, as SlurmUser, while it holds its burst-buffer plugin lock
(bb_g_get_status), which every sbatch waits for under the job write lock: dac-bbstat, a Python
started per call, held it 70 ms a call (issue 45). This script, started by a Lua
interpreter in about a millisecond, asks dac's answerer (dac-answerer, dacservice/answerer/)
over its unix socket with lua-socket for what dac-bbstat would print, prints it and exits 0;
whenever lua-socket is missing, the socket absent, the answerer refuses or is slower than
DAC_ANSWERER_TIMEOUT, it runs dac-bbstat with the very same words instead (through
`sh -c 'exec dac-bbstat ...'`: Lua has no exec). It runs nothing else: the words are any
user's, and dacctl acts as root on some (docs/security.md).

Install it executable, as GetSysStatus (docs/slurm.md, burst_buffer/datawarp):
  install -m 0755 dwstat.lua /usr/local/bin/dac_dwstat
Lua 5.1 to 5.4 run it alike; its first line names Debian's lua5.1 as dw_wlm_cli.lua's does
(edit it where the Lua with lua-socket is another: RHEL's /usr/bin/lua).

Environment, slurmctld's own (datawarp's calls inherit it):
  DAC_BBSTAT           path of dac-bbstat (default /usr/local/bin/dac-bbstat)
  DAC_ANSWERER_SOCKET  the answerer's socket (default /run/dac-answerer/socket; "none": never ask)
  DAC_ANSWERER_TIMEOUT seconds to wait for its reply (default 0.5)
  DAC_SLURM_LOG        file that gets one line each time the answerer is passed over (optional)
Slurm names no caller under datawarp, so the answer is what dac-bbstat shows anyone; the
caller the answerer is given is DAC_BBSTAT_CALLER, which dac-bbstat would read from the same
environment (unset, as docs/slurm.md says it must be).
--]]

local function setting(name, default)
	local v = os.getenv(name)
	if v == nil or v == "" then
		return default
	end
	return v
end

local BBSTAT = setting("DAC_BBSTAT", "/usr/local/bin/dac-bbstat")
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

-- dac-bbstat with this process's own words; this process ends with its exit status.
local function exec_bbstat()
	local cmd = "exec " .. quote(BBSTAT)
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
		f:write(string.format("dac_dwstat: answerer %s: %s; running dac-bbstat\n", ANSWERER,
			tostring(why)))
		f:close()
	end
end

local function encode(s)
	return (string.gsub(s, "[^%w%-%._/:=,]", function(c)
		return string.format("%%%02X", string.byte(c))
	end))
end

-- The answerer's reply to `dac-answer/2 bbstat caller:<caller> <words>`: dac-bbstat's stdout,
-- or nil and why it gave none. One request a connection, the reply read to the close that
-- ends it: dw_wlm_cli.lua's client, kept in step by hand (each file is installed alone). An
-- empty word is sent as NUL, which no argv holds (a line cannot carry an empty last word).
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
	local line = "dac-answer/2 bbstat caller:" .. encode(os.getenv("DAC_BBSTAT_CALLER") or "")
	for i = 1, #arg do
		line = line .. " " .. encode(arg[i] == "" and "\0" or arg[i])
	end
	ok, err = c:send(line .. "\n")
	if ok ~= nil then
		-- a connected socket's age is the clock (socket.core's gettime, without loading it)
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
	if tonumber(status) ~= 0 then
		return nil, "exit " .. status
	end
	if #rest < tonumber(n) then
		return nil, "a reply cut short"
	end
	return string.sub(rest, 1, tonumber(n))
end

if ANSWERER == "none" then
	exec_bbstat()
end
-- socket.unix is C: package.path (seven Lua paths, an open() each) is not searched
package.path = ""
local found, unix = pcall(require, "socket.unix")
if not found or type(unix) ~= "table" then
	note("no lua-socket")
	exec_bbstat()
end
local out, why = ask(unix)
if out == nil then
	if why ~= "No such file or directory" then -- no answerer installed: nothing to say
		note(why)
	end
	exec_bbstat()
end
io.stdout:write(out)
os.exit(0)
