package httpx_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/resilience/httpx"
)

func Example() {
	// An upstream that is busy on its first hit.
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	client, err := httpx.NewClient(&http.Client{Timeout: 10 * time.Second}, httpx.Options{
		CacheTTL: time.Minute,
		Breaker:  breaker.Settings{Failures: 5, OpenTimeout: 30 * time.Second},
		Fallback: func(req *http.Request, cause error) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("fallback"))}, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.CloseIdleConnections()

	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	fmt.Println("upstream hits:", hits.Load())
	// Output:
	// 200 hello
	// 200 hello
	// 200 hello
	// upstream hits: 2
}

func ExampleNew() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()

	base := &http.Transport{}
	defer base.CloseIdleConnections()
	t, err := httpx.New(base, httpx.Options{
		MaxAttempts:    2,
		InitialBackoff: time.Millisecond,
		Breaker:        breaker.Settings{Failures: 2},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: t}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, t.BreakerState(srv.Listener.Addr().String()))
	_, err = client.Get(srv.URL)
	fmt.Println(errors.Is(err, breaker.ErrOpen))
	// Output:
	// 502 open
	// true
}

func ExampleBreakers() {
	// An upstream that throttles every request.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()

	client, err := httpx.NewClient(nil, httpx.Options{
		MaxAttempts: 1,
		Breaker:     breaker.Settings{Failures: 2, OpenTimeout: time.Minute},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.CloseIdleConnections()

	for range 2 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	for host, state := range httpx.Breakers(client) {
		fmt.Println(host == srv.Listener.Addr().String(), state)
	}
	// Output:
	// 429
	// 429
	// true open
}
