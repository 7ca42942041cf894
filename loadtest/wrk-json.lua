-- wrk script: requests as the tools ask, and the result as one JSON line on stdout.
--
-- wrk -s loadtest/wrk-json.lua URL -- [PATH [LO HI]]
--   PATH  the request path (default: the URL's own);
--   LO HI with them, each request is PATH?id=N with N drawn uniformly from LO..HI,
--         each wrk thread with its own seed.
-- done() prints, after wrk's own text, a line starting "WRK_JSON " followed by
-- {"requests", "duration_s", "rps", "non_2xx_3xx", "errors": {connect, read, write,
-- status, timeout}, "latency_us": {"p50", "p90", "p99", "max", "mean"}} (lab/loadgen.py
-- reads it), so no tool scrapes wrk's screen.
local path, lo, hi
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("seed", #threads)
end

function init(args)
  path = args[1]
  lo, hi = tonumber(args[2]), tonumber(args[3])
  math.randomseed(os.time() * 1000 + (seed or 0))
end

function request()
  if lo and hi then
    return wrk.format("GET", path .. "?id=" .. math.random(lo, hi))
  end
  return wrk.format("GET", path)
end

function done(summary, latency, requests)
  local e = summary.errors
  print(string.format(
    'WRK_JSON {"requests":%d,"duration_s":%.6f,"rps":%.3f,"non_2xx_3xx":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f}}',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    e.status, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    latency.mean))
end
