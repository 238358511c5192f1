//go:build !race

package crosspod_test

const raceEnabled = false
