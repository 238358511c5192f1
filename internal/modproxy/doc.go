// Package modproxy builds a Go module proxy in a folder, to be served as
// GOPROXY=file:///folder, that holds the repository's own modules at the
// versions their go.mod files require of each other.
//
// The modules of the repository (the root, backend/postgres, examples)
// require each other at a real version and replace nothing, as a user's
// go get sees them. Until that version is tagged it cannot be fetched, so
// a build outside the workspace (GOWORK=off) takes it from this proxy,
// which holds the working tree as that version: it shows that the tree,
// once tagged, installs. A version that is tagged already is served from
// its tag, as the public proxy would serve it.
//
// Modules of other repositories are not in the proxy: list a second proxy
// after it (the module cache's download folder, file://$GOMODCACHE/cache/download,
// keeps the network off).
//
//	go run scripts/modproxy.go -o DIR
package modproxy
