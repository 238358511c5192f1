package cache

import "github.com/herdguard/herdguard/internal/rcache"

// Codec turns values into bytes and back for a shared store such as
// [Redis]: Marshal(v any) ([]byte, error) and Unmarshal(data []byte,
// v any) error. Implementations must be safe for concurrent use.
type Codec = rcache.Codec

// JSON is the default [Codec]: encoding/json.
var JSON Codec = rcache.JSON
