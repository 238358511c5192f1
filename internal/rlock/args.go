package rlock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// CheckArgs checks a lock call's key and lease, for every locker.
func CheckArgs(key string, lease time.Duration) error {
	if key == "" {
		return fmt.Errorf("lock: empty key")
	}
	if lease <= 0 {
		return fmt.Errorf("lock: lease must be positive, got %v", lease)
	}
	return nil
}

// NewToken returns 16 random bytes, hex encoded.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
