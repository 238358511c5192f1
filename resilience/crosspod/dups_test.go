package crosspod_test

// duplicateLoads returns pod i's Stats().DuplicateLoads.
func (f *fleet) duplicateLoads(i int) uint64 {
	f.t.Helper()
	id := f.newID()
	if err := f.send(i, command{Op: "stats", ID: id}); err != nil {
		f.t.Fatal(err)
	}
	return f.other("stats", id, stepBound).Dups
}
