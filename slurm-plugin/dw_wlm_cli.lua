#!/usr/bin/lua5.1
--[[
dac's dw_wlm_cli for Slurm's burst_buffer/datawarp plugin: the program GetSysState names.

slurmctld forks GetSysState for every call, with Cray's dw_wlm_cli arguments
(`--function <name> ...`). `job_process`, `pools` and `paths` run inside slurmctld under its
job lock: this script, started by the lua5.1 interpreter in about a millisecond, asks dac's
answerer (dac-answerer, dacservice/answerer.py) over its unix socket with lua-socket, prints
its stdout and stderr and exits with its status, byte for byte what `dacctl --function` would.
Every other function, and these three whenever lua-socket is missing, the socket absent, the
answerer refuses or is slower than DAC_ANSWERER_TIMEOUT, run `dacctl` with the very same
arguments (through `sh -c 'exec dacctl ...'`: Lua 5.1 has no exec), so Slurm loses nothing.

Install it executable, as GetSysState (docs/slurm.md, burst_buffer/datawarp):
  install -m 0755 dw_wlm_cli.lua /usr/local/bin/dac_wlm_cli
The first line names Debian's and Ubuntu's Lua 5.1 (package lua5.1) itself, not through
`/usr/bin/env`, whose own exec costs as much as Lua's start; where Lua 5.1 is elsewhere
(RHEL's compat-lua: /usr/bin/lua-5.1), edit that line.

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

-- dacctl with this process's own arguments; this process ends with its exit status.
local function exec_dacctl()
	local cmd = "exec " .. quote(DACCTL)
	for i = 1, #arg do
		cmd = cmd .. " " .. quote(arg[i])
	end
	io.stdout:flush()
	local status = os.execute(cmd)
	if status % 256 ~= 0 then -- killed by a signal: as a shell reports it
		os.exit(128 + status % 128)
	end
	os.exit(math.floor(status / 256))
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

-- The answerer's reply: (exit status, stdout and stderr), or nil and why it gave none.
local function ask(unix, clock)
	local deadline = clock() + TIMEOUT
	local c = unix.stream()
	local function step(ok, err)
		if ok == nil then
			error(err or "closed", 0)
		end
		c:settimeout(math.max(0, deadline - clock()))
		return ok
	end
	local ok, rc, body = pcall(function()
		local line = "dac-answer/1 " .. arg[2]
		for i = 3, #arg do
			line = line .. " " .. encode(arg[i])
		end
		c:settimeout(TIMEOUT)
		step(c:connect(ANSWERER))
		step(c:send(line .. "\n"))
		local head = step(c:receive("*l"))
		local status, n = string.match(head, "^ANSWER (%d+) (%d+)$")
		if status == nil then
			error(string.match(head, "^REFUSE (.*)$") or "no answer", 0)
		end
		local rest, err, partial = c:receive("*a") -- to the close, which ends the reply
		if rest == nil and err ~= "closed" then
			error(err, 0)
		end
		rest = rest or partial or ""
		if #rest < tonumber(n) then
			error("a reply cut short", 0)
		end
		return tonumber(status), { string.sub(rest, 1, tonumber(n)), string.sub(rest, tonumber(n) + 1) }
	end)
	c:close()
	if not ok then
		return nil, rc
	end
	return rc, body
end

if arg[1] ~= "--function" or not HOT[arg[2]] or ANSWERER == "" or ANSWERER == "none" then
	exec_dacctl()
end
local loaded, core = pcall(require, "socket.core")
local found, unix = pcall(require, "socket.unix")
if not loaded or type(core) ~= "table" or not found or type(unix) ~= "table" then
	note("no lua-socket")
	exec_dacctl()
end
local rc, out = ask(unix, core.gettime)
if rc == nil then
	if out ~= "No such file or directory" then -- no answerer installed: nothing to say
		note(out)
	end
	exec_dacctl()
end
io.stdout:write(out[1])
io.stderr:write(out[2])
os.exit(rc)
