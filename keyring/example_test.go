package keyring_test

import (
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/herdguard/herdguard/keyring"
)

// ExampleNew rotates from key 1 to key 2 in the three documented
// steps, each one deployed to every process before the next, so that at
// every step each process opens what the others seal. Set as
// cache.RedisOptions.Encrypt (or resilience.RedisOptions.Encrypt), a
// keyring seals every entry a Redis store writes.
func ExampleNew() {
	newSecret := func() []byte { // in production: from your secret store
		b := make([]byte, 32) // AES-256
		_, _ = rand.Read(b)
		return b
	}
	key1 := keyring.Key{ID: 1, Secret: newSecret()}
	key2 := keyring.Key{ID: 2, Secret: newSecret()}
	const name = "hg:{5:users:42}:v" // a value is bound to its full Redis key

	before, _ := keyring.New(key1)
	steps := []struct {
		primary keyring.Key
		others  []keyring.Key
	}{
		{key1, []keyring.Key{key2}}, // 1. key 2 opens; key 1 still seals
		{key2, []keyring.Key{key1}}, // 2. key 2 seals; key 1's values still open
		{key2, nil},                 // 3. once key 1's values have expired: drop it
	}
	sealed := before.Seal(name, []byte("Ada"))
	for i, s := range steps {
		ring, err := keyring.New(s.primary, s.others...)
		if err != nil {
			panic(err)
		}
		plain, err := ring.Open(name, sealed) // sealed by the step before
		fmt.Printf("step %d, %v: %q %v\n", i+1, ring, plain, err)
		sealed = ring.Seal(name, []byte("Ada"))
	}

	// A process that skipped step 1 cannot open key 2's values, and a
	// value moved to another key opens nowhere: misses, never errors.
	_, err := before.Open(name, sealed)
	fmt.Println(errors.Is(err, keyring.ErrDecrypt), err)
	ring, _ := keyring.New(key2)
	_, err = ring.Open("hg:{5:users:43}:v", sealed)
	fmt.Println(errors.Is(err, keyring.ErrDecrypt), err)
	fmt.Println(key1) // secrets never print
	// Output:
	// step 1, keyring.Ring{primary: 1, ids: [1 2]}: "Ada" <nil>
	// step 2, keyring.Ring{primary: 2, ids: [2 1]}: "Ada" <nil>
	// step 3, keyring.Ring{primary: 2, ids: [2]}: "Ada" <nil>
	// true keyring: value did not decrypt: sealed under key id 2, which the keyring (ids [1]) does not hold
	// true keyring: value did not decrypt: key id 2: authentication failed (another key with that id, altered bytes, or a value moved from another key)
	// keyring.Key{ID: 1, Secret: [redacted]}
}
