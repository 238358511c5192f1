package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// commandCalls returns the total of calls in INFO commandstats, which
// counts commands run inside Lua scripts as well as the scripts themselves,
// leaving out INFO (the harness's own reads). -1 when Redis cannot tell.
func commandCalls(ctx context.Context, c *redis.Client) int64 {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return -1
	}
	return parseCommandStats(s)
}

// parseCommandStats sums calls= over the cmdstat_ lines of s, leaving out
// cmdstat_info.
func parseCommandStats(s string) int64 {
	var total int64
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return -1
				}
				total += n
			}
		}
	}
	return total
}
