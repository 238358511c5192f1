package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

func ExamplePipeline_Invalidate_reload() {
	users, err := resilience.New[user]("users-invalidate").Cache(time.Hour).Build()
	if err != nil {
		panic(err)
	}
	defer users.Close()
	var version atomic.Int64
	load := func(ctx context.Context, id string) (user, error) {
		return user{Name: fmt.Sprintf("user %s v%d", id, version.Add(1))}, nil
	}
	ctx := context.Background()
	show := func() {
		r, err := users.GetResult(ctx, "42", load)
		fmt.Println(r.Value.Name, r.Source, err)
	}
	show()
	show()
	// The user was renamed: drop the cached copy (in Redis too, with Redis).
	if err := users.Invalidate(ctx, "42"); err != nil {
		panic(err)
	}
	show()
	// Output:
	// user 42 v1 loader <nil>
	// user 42 v1 l1 <nil>
	// user 42 v2 loader <nil>
}

func ExampleBuilder_Retry() {
	users, err := resilience.New[user]("users-retry").
		Cache(time.Minute).
		Retry(resilience.RetrySettings{MaxAttempts: 3, Initial: 10 * time.Millisecond}).
		Build()
	if err != nil {
		panic(err)
	}
	defer users.Close()
	var attempts atomic.Int64
	flaky := func(ctx context.Context, id string) (user, error) {
		n := attempts.Add(1)
		fmt.Println("attempt", n)
		if n < 3 {
			return user{}, errors.New("connection reset by peer")
		}
		return user{Name: "Ada"}, nil
	}
	r, err := users.GetResult(context.Background(), "42", flaky)
	fmt.Println(r.Value.Name, r.Source, err)
	// Output:
	// attempt 1
	// attempt 2
	// attempt 3
	// Ada loader <nil>
}
