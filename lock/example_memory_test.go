package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/lock"
)

// ExampleMemory: two goroutines want the same key; one gets it, the other
// is told another holder has it, and gets it once it is released.
func ExampleMemory() {
	var locker lock.Memory // the zero value is ready
	ctx := context.Background()
	held, released := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		lease, err := locker.TryAcquire(ctx, "user:42", 30*time.Second)
		if err != nil {
			panic(err)
		}
		fmt.Println("first: acquired, fence", lease.Fence())
		close(held)
		<-released
		fmt.Println("first: released:", lease.Release(ctx))
	}()
	go func() {
		defer wg.Done()
		<-held
		_, err := locker.TryAcquire(ctx, "user:42", 30*time.Second)
		fmt.Println("second: not acquired:", errors.Is(err, backend.ErrNotAcquired))
		close(released)
	}()
	wg.Wait()

	lease, err := locker.TryAcquire(ctx, "user:42", 30*time.Second)
	fmt.Println("after release: fence", lease.Fence(), err)
	// Output:
	// first: acquired, fence 1
	// second: not acquired: true
	// first: released: <nil>
	// after release: fence 2 <nil>
}
