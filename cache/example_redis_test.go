package cache_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/cache"
)

// ExampleNewRedis stores and reads a value in Redis. It needs a running
// Redis, so it is compiled but not run.
func ExampleNewRedis() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()

	users, err := cache.NewRedis[string](client, cache.RedisOptions{Namespace: "users"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	now := time.Now()
	stored, err := users.Set(ctx, "42", cache.Entry[string]{
		Value:      "Ada",
		Written:    now,
		Expires:    now.Add(cache.Jitter(time.Minute, 0.1)),
		StaleUntil: now.Add(time.Hour),
	})
	fmt.Println(stored, err)

	e, freshness, err := users.Get(ctx, "42")
	fmt.Println(e.Value, freshness, err)
}
