//go:build ignore

// Modproxy writes a Go module proxy into a folder, holding the
// repository's own modules at the version their go.mod files require of
// each other (the working tree, or the tag when that version is tagged),
// and prints that version. See internal/modproxy.
//
//	go run scripts/modproxy.go -o DIR
//	GOWORK=off GOPROXY=file://DIR,... go build ./...
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/herdguard/herdguard/internal/modproxy"
)

func main() {
	out := flag.String("o", "", "the folder to write the proxy into")
	root := flag.String("C", ".", "the repository root")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "usage: go run scripts/modproxy.go -o DIR [-C ROOT]")
		os.Exit(2)
	}
	mods, err := modproxy.Modules(*root)
	if err == nil {
		var version string
		if version, err = modproxy.Version(mods); err == nil {
			if err = modproxy.Build(*out, *root, mods, version); err == nil {
				fmt.Println(version)
				return
			}
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
