package httpx

import (
	"net/http"

	"github.com/herdguard/herdguard/breaker"
)

// BreakerState returns the state of host's breaker: [breaker.Closed] for a
// host the transport has not sent to. host is a URL's Host, with the port
// if the URL has one.
func (t *Transport) BreakerState(host string) breaker.State {
	if b, ok := t.breakers.Load(host); ok {
		return b.(*breaker.Breaker).State()
	}
	return breaker.Closed
}

// breakerFor returns host's breaker, creating it on first use.
func (t *Transport) breakerFor(host string) *breaker.Breaker {
	if b, ok := t.breakers.Load(host); ok {
		return b.(*breaker.Breaker)
	}
	s := t.o.Breaker
	if s.Name == "" {
		s.Name = host
	} else {
		s.Name += " " + host
	}
	b, err := breaker.New(s)
	if err != nil { // New validated these settings already
		panic("httpx: " + err.Error())
	}
	// Two first requests may both create one; LoadOrStore keeps a single
	// breaker and the other is dropped before any use.
	actual, _ := t.breakers.LoadOrStore(host, b)
	return actual.(*breaker.Breaker)
}

// Breakers returns the state of every host's breaker, keyed by host (a
// URL's Host, with the port if the URL has one), for the hosts the
// transport has sent to. The map is a snapshot the caller owns: later
// requests do not change it.
func (t *Transport) Breakers() map[string]breaker.State {
	states := make(map[string]breaker.State)
	t.breakers.Range(func(host, b any) bool {
		states[host.(string)] = b.(*breaker.Breaker).State()
		return true
	})
	return states
}

// Breakers returns [Transport.Breakers] of c's Transport, so that a
// client made by [NewClient] reports its breakers without a type
// assertion. It returns nil when c is nil or its Transport is not a [*Transport]
// (when another RoundTripper wraps it, say).
func Breakers(c *http.Client) map[string]breaker.State {
	if c == nil {
		return nil
	}
	if t, ok := c.Transport.(*Transport); ok {
		return t.Breakers()
	}
	return nil
}
