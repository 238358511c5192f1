//go:build race

package crosspod_test

const raceEnabled = true
