package fakes

// Cleaner registers a function to run when its owner is done: a
// *testing.T, *testing.B or testing.TB in tests, or any other owner (the
// `relay bench serve` command) that closes the fakes it starts.
type Cleaner interface {
	Cleanup(func())
}
