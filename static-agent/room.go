package main

// Whether the sandbox has room for another process: its cgroup's pids and
// memory against their limits (runtime/agent/healing.py's pressure, with
// its thresholds). Under gVisor, or with no limit, there is no telling:
// room is assumed.

import (
	"os"
	"strconv"
	"strings"
)

const (
	// Room a call needs to start (launcher, bash, a pipeline): less is pressure.
	pidsHeadroom = 8
	// Memory use from this share of the limit on is pressure.
	memoryPressure = 0.9
)

// cgroupUsage lists, per kind, (limit, current) files under v1 then v2.
var cgroupUsage = map[string][][2]string{
	"pids": {
		{"/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids/pids.current"},
		{"/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids.current"},
	},
	"memory": {
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"},
		{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
	},
}

// usage is (limit, current) of the sandbox's cgroup for `kind`; a value
// that is unknown ("max", a v1 "no limit", no file) is -1.
func usage(kind string) (int64, int64) {
	for _, files := range cgroupUsage[kind] {
		current := readCount(files[1])
		if current < 0 {
			continue
		}
		limit := readCount(files[0])
		if limit >= 1<<60 {
			limit = -1 // cgroup v1 says "no limit" with a huge number
		}
		return limit, current
	}
	return -1, -1
}

func readCount(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// shortOfRoom names the limit that is (nearly) full, or "".
func shortOfRoom() string {
	if limit, current := usage("pids"); limit >= 0 && current >= 0 && current+pidsHeadroom > limit {
		return "pids"
	}
	if limit, current := usage("memory"); limit >= 0 && current >= 0 && float64(current) >= float64(limit)*memoryPressure {
		return "memory"
	}
	return ""
}
