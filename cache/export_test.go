package cache

import "github.com/redis/go-redis/v9"

// SharedClient returns the package's test Redis client, for the tests of
// package cache_test.
func SharedClient() *redis.Client { return rdb }
