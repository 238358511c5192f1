package presence

import "testing"

func TestCount_climbsOnFoundAndSinksOnMisses(t *testing.T) {
	var c Count
	if c.Likely() {
		t.Fatal("a zero Count is likely")
	}
	for i := 0; i < On; i++ {
		if c.Likely() {
			t.Fatalf("likely after %d finds, want %d", i, On)
		}
		c.Saw(true)
	}
	if !c.Likely() {
		t.Fatalf("not likely after %d finds", On)
	}
	for i := 0; i < 2*Max; i++ {
		c.Saw(true)
	}
	// From the ceiling, misses take it below On within Max/Miss/2+1 reads.
	n := 0
	for c.Likely() {
		c.Saw(false)
		n++
	}
	if want := (Max-On)/Miss + 1; n != want {
		t.Fatalf("%d misses from the ceiling to unlikely, want %d", n, want)
	}
	// Three finds in four (+3) and one miss (-Miss) do not raise it.
	for i := 0; i < 4*Max; i++ {
		c.Saw(i%4 != 3)
	}
	if c.Likely() {
		t.Fatal("likely while one read in four misses")
	}
}
