// Package bench compares the pipeline's in-process cache hit with peer
// libraries, in one run:
//
//	cd examples && go test -run '^$' -bench . -benchmem -count 5 ./bench
package bench
