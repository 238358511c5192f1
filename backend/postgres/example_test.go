package postgres_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herdguard/herdguard/backend/postgres"
	"github.com/herdguard/herdguard/resilience"
)

// A pipeline on a backend on the service's pool, its tables created at
// start-up. Behind
// PgBouncer in transaction mode, ListenDSN names the database server
// itself, for the LISTEN connections.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	pg, err := postgres.New(pool, postgres.Options{
		Unlogged:  true, // a crash empties the cache, never the locks
		ListenDSN: os.Getenv("DATABASE_DIRECT_URL"),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := pg.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	users, err := resilience.New[string]("users").
		Cache(time.Minute).
		Backend(pg).
		Lock(resilience.LockSettings{}).
		Build()
	if err != nil {
		log.Fatal(err)
	}
	defer users.Close()
	name, err := users.Get(ctx, "42", func(ctx context.Context, id string) (string, error) {
		var name string
		err := pool.QueryRow(ctx, "SELECT name FROM users WHERE id = $1", id).Scan(&name)
		return name, err
	})
	log.Println(name, err)
}
