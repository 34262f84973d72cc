-- bench/hot_path.py's in-process rows: burst_buffer.lua's three hooks inside slurmctld, each
-- call timed inside Lua 5.1 around the hook (as slurmctld's lua_pcall runs it), against a
-- running dac-answerer. Slurm loads the script afresh for every call: so does this.
-- lua5.1 hot_path_inprocess.lua <burst_buffer.lua> <script> <pathfile> <rounds>
local lua, script, pathfile, rounds = arg[1], arg[2], arg[3], tonumber(arg[4])
local forked = 0
slurm = { SUCCESS = 0, ERROR = -1,
	log_info = function(fmt, ...)
		forked = forked + 1
		io.stderr:write(string.format(fmt, ...), "\n")
	end,
	log_error = function(fmt, ...) io.stderr:write(string.format(fmt, ...), "\n") end }
local clock = require("socket").gettime
local calls = {
	job_process = function() return slurm_bb_job_process(script) end,
	pools = function() return slurm_bb_pools() end,
	paths = function() return slurm_bb_paths("7", script, pathfile) end,
}
for _ = 1, rounds do
	for _, name in ipairs({ "job_process", "pools", "paths" }) do
		dofile(lua)
		if name == "paths" then -- Slurm hands paths an empty file (job.<id>/path): so does this
			io.open(pathfile, "w"):close()
		end
		local t = clock()
		local rc, out = calls[name]()
		local dt = (clock() - t) * 1000
		if rc ~= 0 then
			io.stderr:write(name, " failed: ", tostring(out), "\n")
			os.exit(1)
		end
		io.write(name, " ", string.format("%.4f", dt), "\n")
	end
end
io.stderr:write("fallbacks logged: ", forked, "\n")
