// Package backendtest checks implementations of [backend.Backend]
// against the contract of [backend.Shared] ([Run]), and holds a
// reference implementation in memory ([Memory]) that passes it.
//
// A backend's module runs the suite from one of its tests, with views
// opened as different processes would open them:
//
//	func TestConformance(t *testing.T) {
//		b := newBackend(t) // the backend under test, on a fresh database
//		backendtest.Run(t, func(t *testing.T, s backend.Scope) backend.Shared {
//			v, err := b.Open(s)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return v
//		})
//	}
//
// The suite checks what the pipeline relies on: exclusive grants with
// increasing fences, tokens checked by Release and Extend, takeover of a
// silent holder and none of a beating one, the fence rules of Save, a
// Save with Release waking waiters, Notify and Announce reaching other
// views, isolated namespaces, and concurrent acquires; and, for a view
// with the batch forms ([backend.SharedMany]; skipped without them),
// LoadMany answering each key as Load does, and TryAcquireMany granting
// each free key as TryAcquire does, one winner per key among views asking
// at once. It does not start processes; the backends' own tests do that.
package backendtest
