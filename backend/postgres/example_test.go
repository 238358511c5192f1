package postgres_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herdguard/herdguard/backend/postgres"
)

// A backend on the service's pool, its tables created at start-up. Behind
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
	_ = pg // given to Builder.Backend
}
