package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

func ExampleNew() {
	b, err := breaker.New(breaker.Settings{
		Name:        "payments",
		Failures:    2,
		OpenTimeout: time.Minute,
		OnStateChange: func(name string, from, to breaker.State) {
			fmt.Printf("%s: %s -> %s\n", name, from, to)
		},
	})
	if err != nil {
		panic(err)
	}
	down := errors.New("connection refused")
	for range 3 {
		err := b.Execute(func() error { return down })
		fmt.Println(err)
	}
	// Output:
	// connection refused
	// payments: closed -> open
	// connection refused
	// breaker: open (payments)
}

func ExampleBreaker_Execute() {
	b, _ := breaker.New(breaker.Settings{Name: "inventory"})
	err := b.Execute(func() error {
		fmt.Println("calling the inventory service")
		return nil
	})
	fmt.Println(err, b.State())
	// Output:
	// calling the inventory service
	// <nil> closed
}
