// Package rkey lays out the Redis keys that package cache and package lock
// share, so that the value, the lock and the fence counter of one cache key
// agree on their names and land in one Redis Cluster hash slot.
//
// For a prefix P, a namespace N (the pipeline's name) and a key K, the base
// is P{len(N):N:K}, with N and K escaped (see below); the value lives at
// base:v, the lock at base:lock and the fence counter at base:fence.
// Everything between the braces is the hash tag, so a Lua script may touch
// all three keys on Redis Cluster. The announcement channel of a namespace
// is P{len(N):N}:announce.
//
// Two rules make the layout safe for any name and key. The namespace is
// length-prefixed, so no two (namespace, key) pairs share a base: pipeline
// "users" with key "admin:1" is {5:users:admin:1}, pipeline "users:admin"
// with key "1" is {11:users:admin:1}. And '%', '{' and '}' are escaped as
// %25, %7B and %7D, so the hash tag always ends at the closing brace the
// layout puts there: keys holding braces spread over Cluster slots like any
// others.
package rkey

import (
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Millis rounds d up to whole milliseconds, never below 1: a positive TTL
// or lease never becomes 0, which Redis refuses.
func Millis(d time.Duration) int64 {
	return int64(max((d+time.Millisecond-1)/time.Millisecond, 1))
}

// DefaultPrefix is the prefix used when none is configured.
const DefaultPrefix = "hg:"

// Field names of the hash stored at a value key. The fence field is shared
// knowledge of both leaves: the cache's write script compares against it and
// the lock's acquire script keeps the fence counter above it.
const (
	// FieldFence holds the fencing number the value was written with, as a
	// decimal integer.
	FieldFence = "f"
	// FieldData holds the encoded entry.
	FieldData = "d"
	// FieldExpires holds when the entry stops being fresh, in Unix
	// milliseconds of the writer's clock, so that a script can tell a
	// fresh value from a stale one without decoding it.
	FieldExpires = "x"
)

// Field names of the hash stored at a lock key, as package lock's scripts
// write them (acquire.lua, extend.lua) and package cache's read the token
// and the grant's fence (set.lua, fence.lua). The key's expiry is the
// lease.
const (
	// LockToken holds the holder's random token.
	LockToken = "t"
	// LockFence holds the grant's fencing number, as a decimal integer.
	LockFence = "f"
	// LockBeat holds the holder's last heartbeat, in Unix milliseconds of
	// the Redis server's clock.
	LockBeat = "h"
	// LockDeadAfter holds how long after its last beat the holder counts
	// as dead, in milliseconds, as the holder declared it.
	LockDeadAfter = "s"
)

// Space names the keys of one namespace. The zero value is not usable; build
// one with [New].
type Space struct {
	// head is P{len(N):N: and channel the announcement channel, built once:
	// a key's names then cost one concatenation each.
	head, channel string
}

// New returns the key space for namespace under prefix. An empty prefix
// means [DefaultPrefix]. The namespace must be non-empty; the prefix must
// not contain a brace, which would move the hash tag.
func New(prefix, namespace string) (Space, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if namespace == "" {
		return Space{}, errors.New("rkey: namespace is required")
	}
	if strings.ContainsAny(prefix, "{}") {
		return Space{}, fmt.Errorf("rkey: prefix %q must not contain braces", prefix)
	}
	ns := escape(namespace)
	ns = strconv.Itoa(len(ns)) + ":" + ns
	return Space{head: prefix + "{" + ns + ":", channel: prefix + "{" + ns + "}:announce"}, nil
}

// escaper makes a name safe inside a hash tag; see the package doc.
var escaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func escape(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	return escaper.Replace(s)
}

// Base returns P{len(N):N:K}, the stem shared by the keys of key.
func (s Space) Base(key string) string {
	return s.head + escape(key) + "}"
}

// Value returns the key that holds key's cached entry.
func (s Space) Value(key string) string { return s.head + escape(key) + "}:v" }

// Lock returns the key that holds key's lock token.
func (s Space) Lock(key string) string { return s.head + escape(key) + "}:lock" }

// Fence returns the key that holds key's fence counter.
func (s Space) Fence(key string) string { return s.head + escape(key) + "}:fence" }

// LockPattern returns a SCAN MATCH pattern that matches the lock keys of
// the namespace and nothing else: its prefix and namespace with glob
// characters escaped.
func (s Space) LockPattern() string {
	return globEscaper.Replace(s.head) + "*}:lock"
}

// globEscaper quotes the characters SCAN MATCH treats as special.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// unescaper undoes escape.
var unescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// KeyOfLock returns the cache key whose lock is at name, and whether name
// is a lock key of the namespace.
func (s Space) KeyOfLock(name string) (key string, ok bool) {
	const tail = "}:lock"
	if !strings.HasPrefix(name, s.head) || !strings.HasSuffix(name, tail) || len(name) < len(s.head)+len(tail) {
		return "", false
	}
	k := name[len(s.head) : len(name)-len(tail)]
	if strings.ContainsAny(k, "{}") {
		return "", false
	}
	return unescaper.Replace(k), true
}

// Channel returns the announcement channel of the namespace.
func (s Space) Channel() string { return s.channel }

// FenceLua is the Lua prelude of the scripts that hand out fences (lock
// grants in package lock, writes and tombstones in package cache): what a
// fence is, the server's clock, and a write's fence. Each such script is
// this prelude followed by its own body.
//
//go:embed fence.lua
var FenceLua string

// Slot returns the Redis Cluster hash slot of key, as CLUSTER KEYSLOT
// does: CRC16 (XMODEM) of the key's hash tag (the part between its first
// "{" and the next "}", when not empty), else of the key, modulo 16384.
// Every key of one cache key shares a slot; a batch script run on Redis
// Cluster carries only keys of one slot.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
