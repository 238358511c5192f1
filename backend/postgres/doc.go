// Package postgres is a coordination backend kept in a PostgreSQL
// database, for package resilience's pipelines ([backend.Backend]):
// processes that share a database share their pipelines' values (L2),
// locks and announcements, as processes sharing a Redis do.
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	pg, _ := postgres.New(pool, postgres.Options{})
//	p, _ := resilience.New[User]("users").Cache(time.Minute).Backend(pg).Lock(resilience.LockSettings{}).Build()
//
// Locks are rows of a table (key, token, fence, lease end, last beat and
// beat period), and their holders' beats rows of another, not session
// advisory locks: they survive connection poolers and need no session
// held for the length of a load. Fences come
// from the lock row, the stored value and the database's clock, so they
// never go backwards, even when the rows are lost. Waiters are woken by
// LISTEN/NOTIFY on one connection per pipeline. See the "PostgreSQL
// backend" section of docs/backends.md for the design and its limits.
package postgres
