package fallback_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/herdguard/herdguard/fallback"
)

func ExampleChain() {
	c := fallback.Chain[string]{Default: fallback.Value("guest")}
	ctx := context.Background()
	cause := errors.New("user service down")

	// A stale copy comes first.
	v, src, err := c.Resolve(ctx, "user:42", cause, "alice (stale)", true)
	fmt.Println(v, src, err)
	// Without one, the default.
	v, src, err = c.Resolve(ctx, "user:42", cause, "", false)
	fmt.Println(v, src, err)
	// The caller's own cancellation is not answered.
	_, src, err = c.Resolve(ctx, "user:42", context.Canceled, "alice (stale)", true)
	fmt.Println(src, err)
	// Output:
	// alice (stale) stale <nil>
	// guest default <nil>
	// none context canceled
}
