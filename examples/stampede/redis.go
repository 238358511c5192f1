package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// lockKeysLeft counts the keys matching pattern (SCAN) and returns the
// longest time to live among them: -1 if one has none, 0 if there are
// none. Keys that expire between the scan and the PTTL are not counted.
func lockKeysLeft(ctx context.Context, c *redis.Client, pattern string) (n int, longest time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var keys []string
	it := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		return 0, 0, fmt.Errorf("stampede: scan %q: %w", pattern, err)
	}
	for batch := range slices.Chunk(keys, 1000) {
		cmds := make([]*redis.DurationCmd, len(batch))
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range batch {
				cmds[i] = p.PTTL(ctx, k)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, 0, fmt.Errorf("stampede: pttl of lock keys: %w", err)
		}
		for _, cmd := range cmds {
			switch d := cmd.Val(); {
			case d == -2: // gone since the scan
			case d == -1:
				n++
				longest = -1
			default:
				n++
				if longest >= 0 {
					longest = max(longest, d)
				}
			}
		}
	}
	return n, longest, nil
}
