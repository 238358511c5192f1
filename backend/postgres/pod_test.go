package postgres

// podEnv carries a pod's configuration, as JSON, from the parent test to
// the child process it starts.
const podEnv = "HERDGUARD_PG_POD"

func podMain(cfg string) int { return 2 }
