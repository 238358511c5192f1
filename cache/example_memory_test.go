package cache_test

import (
	"fmt"
	"time"

	"github.com/herdguard/herdguard/cache"
)

func ExampleNewMemory() {
	users := cache.NewMemory[string](cache.MemoryOptions{MaxEntries: 1000})
	now := time.Now()
	users.Set("42", cache.Entry[string]{
		Value:      "Ada",
		Written:    now,
		Expires:    now.Add(time.Minute),
		StaleUntil: now.Add(time.Hour),
	})
	users.Set("7", cache.Entry[string]{
		Value:      "Grace",
		Written:    now.Add(-2 * time.Minute),
		Expires:    now.Add(-time.Minute), // past its TTL, within its grace
		StaleUntil: now.Add(time.Hour),
	})

	e, f := users.Lookup("42")
	fmt.Println(e.Value, f)
	e, f = users.Lookup("7")
	fmt.Println(e.Value, f)
	_, f = users.Lookup("1")
	fmt.Println(f)

	users.Delete("42")
	_, f = users.Lookup("42")
	fmt.Println(f, users.Len())
	// Output:
	// Ada fresh
	// Grace stale
	// miss
	// miss 1
}
