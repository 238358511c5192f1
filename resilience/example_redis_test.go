package resilience_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/resilience"
)

// exampleRedis starts a private redis-server for one example and returns a
// client of it, and the function that stops both. A program dials its own
// Redis instead:
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
func exampleRedis() (redis.UniversalClient, func()) {
	srv, stop, err := redistest.New()
	if err != nil {
		panic(err)
	}
	return srv.Client(), stop
}

// ExampleNew_redis is the pipeline of a service that runs in many
// processes: each builds the same pipeline on the same Redis, and a cold
// key is loaded once across all of them. Here two pipelines stand for two
// processes.
func ExampleNew_redis() {
	client, stop := exampleRedis()
	defer stop()

	newPipeline := func() *resilience.Pipeline[user] {
		users, err := resilience.New[user]("users").
			Cache(5 * time.Minute).
			Redis(client).
			Lock(resilience.LockSettings{}).
			Breaker(breaker.Settings{}).
			Timeout(2 * time.Second).
			Stale(time.Hour).
			Build()
		if err != nil {
			panic(err)
		}
		return users
	}
	podA, podB := newPipeline(), newPipeline()
	defer podA.Close()
	defer podB.Close()

	var loads atomic.Int64
	load := func(ctx context.Context, id string) (user, error) {
		loads.Add(1) // the database query
		return user{Name: "user " + id}, nil
	}
	ctx := context.Background()
	for _, users := range []*resilience.Pipeline[user]{podA, podB, podA} {
		r, err := users.GetResult(ctx, "42", load)
		fmt.Println(r.Value.Name, r.Source, err)
	}
	fmt.Println("loads:", loads.Load())
	// Output:
	// user 42 loader <nil>
	// user 42 l2 <nil>
	// user 42 l1 <nil>
	// loads: 1
}
