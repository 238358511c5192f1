package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/resilience"
)

type user struct{ Name string }

func ExampleNew() {
	users, err := resilience.New[user]("users").
		Cache(5 * time.Minute).
		SingleFlight().
		Breaker(breaker.Settings{}).
		Timeout(2 * time.Second).
		Stale(time.Hour).
		DefaultValue(user{Name: "guest"}).
		Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer users.Close()
	fmt.Println(users.Name())
	// Output: users
}

func ExampleBuilder_Build_error() {
	_, err := resilience.New[user]("users").Keyless().Cache(time.Minute).Build()
	var ce *resilience.ConfigError
	fmt.Println(errors.As(err, &ce), ce.Field)
	fmt.Println(err)
	// Output:
	// true Cache
	// resilience: pipeline "users": Cache: needs a key, but the pipeline is Keyless: remove one of the two
}

func ExamplePipeline_GetResult() {
	users, _ := resilience.New[user]("users-get").Cache(time.Minute).SingleFlight().Build()
	defer users.Close()
	load := func(ctx context.Context, id string) (user, error) {
		if id == "0" {
			return user{}, resilience.ErrNotFound
		}
		return user{Name: "user " + id}, nil
	}
	for range 2 {
		r, err := users.GetResult(context.Background(), "42", load)
		fmt.Println(r.Value.Name, r.Source, err)
	}
	_, err := users.Get(context.Background(), "0", load)
	fmt.Println(errors.Is(err, resilience.ErrNotFound))
	// Output:
	// user 42 loader <nil>
	// user 42 l1 <nil>
	// true
}

func ExamplePipeline_Do() {
	post, _ := resilience.New[string]("orders-post").Keyless().
		CallTimeout(time.Second).
		DefaultValue("queued for retry").
		Build()
	defer post.Close()
	r, err := post.DoResult(context.Background(), func(ctx context.Context) (string, error) {
		return "", errors.New("upstream: 503")
	})
	fmt.Println(r.Value, r.Source, r.FellBack(), err)
	// Output: queued for retry default true <nil>
}
