package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/lock"
)

// ExampleNewRedis takes a lock across processes, keeps it while loading,
// and announces the value. It needs a running Redis, so it is compiled but
// not run.
func ExampleNewRedis() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()

	locker, err := lock.NewRedis(client, lock.RedisOptions{Namespace: "users"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lease, err := locker.TryAcquire(ctx, "42", 30*time.Second)
	switch {
	case errors.Is(err, backend.ErrNotAcquired):
		fmt.Println("another process is loading; wait for its announcement")
		return
	case err != nil:
		fmt.Println("Redis failed or ctx ended; load without the lock:", err)
		return
	}
	defer lease.Release(context.WithoutCancel(ctx))
	lease.KeepAlive(ctx, nil)
	fmt.Println("loading under fence", lease.Fence())
}

// ExampleNewRedisNotifier wakes a waiter in another process when a value
// lands. It needs a running Redis, so it is compiled but not run.
func ExampleNewRedisNotifier() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()

	n, err := lock.NewRedisNotifier(client, lock.RedisOptions{Namespace: "users"})
	if err != nil {
		panic(err)
	}
	defer n.Close()

	landed, stop := n.Subscribe("42")
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	select {
	case <-landed:
		fmt.Println("value landed: read it from the cache")
	case <-ctx.Done():
		fmt.Println("no announcement: poll the cache")
	}
}
