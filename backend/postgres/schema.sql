-- schema.sql creates the tables and functions of one Backend (Schema and
-- Prefix), idempotently. Migrate runs it in one transaction, under an
-- advisory transaction lock, so that many processes may run it at once.
-- {names} are replaced by quoted identifiers before it runs.
--
-- {lock} holds one row per key whose lock was granted or whose fence was
-- taken within the fence retention: the current holder (token, NULL when
-- free), the largest fence handed out for the key, the lease's end and the
-- holder's last beat with its declared period. The row outlives its
-- grants: it is the key's fence counter, and a release only clears the
-- token (an update in place, without index churn).
--
-- {beat} holds the holders' beats since their grants: the lease's end and
-- the last beat of the holder token, one row per key, written by beats
-- alone, so that a beat takes no row lock that a save, a release or an
-- acquire needs; a row whose token is not the key's holder any more
-- counts for nothing. A lease's end and last beat are the later of the
-- {lock} row's (its grant) and of its {beat} row's (see {lease}). It is
-- UNLOGGED: after a crash it is empty, and the holders that were live look
-- dead two beats after their grants (a take-over, under a new fence),
-- never alive when they are not.
--
-- Row locks are held for one statement each, so waits for them are short;
-- {lock_wait} bounds them (lock_timeout) all the same, so that a statement
-- whose client gave up (the server does not notice at once) cannot grant
-- a lock long after: see the cleanup that follows an unknown outcome.
--
-- {value} holds one row per stored value: its fence, its bytes, and when
-- the store may drop it. Every time is the database's clock.

CREATE TABLE IF NOT EXISTS {lock} (
	namespace  text        NOT NULL,
	key        text        NOT NULL,
	token      text,
	fence      bigint      NOT NULL,
	expires_at timestamptz NOT NULL,
	beat_at    timestamptz NOT NULL,
	beat_every interval    NOT NULL,
	PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS {lock_expires} ON {lock} (expires_at);

CREATE {persistence} TABLE IF NOT EXISTS {value} (
	namespace text        NOT NULL,
	key       text        NOT NULL,
	fence     bigint      NOT NULL,
	data      bytea       NOT NULL,
	until     timestamptz NOT NULL,
	PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS {value_until} ON {value} (until);

CREATE UNLOGGED TABLE IF NOT EXISTS {beat} (
	namespace  text        NOT NULL,
	key        text        NOT NULL,
	token      text        NOT NULL,
	expires_at timestamptz NOT NULL,
	beat_at    timestamptz NOT NULL,
	PRIMARY KEY (namespace, key)
);

-- {clock_us} is a time in microseconds since 1970: the lower bound of
-- every fence, so that fences keep growing when the rows that counted
-- them are lost (truncated, or emptied by a crash for an UNLOGGED table).
CREATE OR REPLACE FUNCTION {clock_us}(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

-- {lease} returns the end and the last beat of the lease of p_token on
-- key, whose {lock} row says p_expires and p_beat: the later of those and
-- of its beats in {beat}. It reads {beat} without locking it. (Version 4.)
CREATE OR REPLACE FUNCTION {lease}(p_ns text, p_key text, p_token text,
	p_expires timestamptz, p_beat timestamptz, OUT o_expires timestamptz, OUT o_beat timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
	b {beat}%ROWTYPE;
BEGIN
	o_expires := p_expires;
	o_beat := p_beat;
	SELECT * INTO b FROM {beat} AS x WHERE x.namespace = p_ns AND x.key = p_key AND x.token = p_token;
	IF FOUND THEN
		o_expires := greatest(p_expires, b.expires_at);
		o_beat := greatest(p_beat, b.beat_at);
	END IF;
END $$;

-- {acquire_many} takes, for each i, key (p_ns[i], p_key[i])'s lock for
-- p_token[i] (a lease of p_lease_us[i], beats every p_beat_us[i]), or
-- takes it over from a holder whose last beat is older than two of its
-- beats, as set operations over the keys. It returns each i with the
-- grant's fence and how: 1 for a free lock, 2 for a take-over; or (0, 0)
-- when a live holder has the key, and for every ask of a key but its
-- first in the call (the first one's grant, or the holder that refused
-- it, holds the key). The live holders are looked for first without
-- locking the rows: their keys are answered at once and hold no row lock
-- until the statement ends, so that the holders' saves and beats, and the
-- acquires of other processes, do not queue behind it (version 3). The
-- other keys' rows are made if missing, then locked in the order of the
-- keys, so that two calls never wait for each other's rows in opposite
-- orders; their locks are held until the call ends: the callers keep
-- their batches small. A fence is the largest of the database clock in
-- microseconds, the key's last fence + 1 and its stored value's fence + 1.
-- The planner settings keep to index lookups, one per key, whatever plan
-- was cached while the tables were small. (Version 5.)
CREATE OR REPLACE FUNCTION {acquire_many}(p_ns text[], p_key text[], p_token text[],
	p_lease_us bigint[], p_beat_us bigint[], OUT o_i int, OUT o_fence bigint, OUT o_how int)
RETURNS SETOF record
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
	n      int := coalesce(array_length(p_key, 1), 0);
	go     boolean[]; -- go[i]: i is its key's first ask and no live holder was seen
	t      timestamptz;
	gi     int[];
	gf     bigint[];
	gh     int[];
	fences bigint[];
	hows   int[];
BEGIN
	IF n = 0 THEN
		RETURN;
	END IF;
	PERFORM set_config('lock_timeout', {lock_wait}, true);
	SELECT array_agg(x.go ORDER BY x.i) INTO go FROM (
		SELECT u.i, row_number() OVER (PARTITION BY u.ns, u.key ORDER BY u.i) = 1 AND
			NOT coalesce(l.token IS NOT NULL AND greatest(l.expires_at, b.expires_at) > clock_timestamp() AND
				greatest(l.beat_at, b.beat_at) + 2 * l.beat_every >= clock_timestamp(), false) AS go
		FROM unnest(p_ns, p_key) WITH ORDINALITY AS u(ns, key, i)
		LEFT JOIN {lock} AS l ON l.namespace = u.ns AND l.key = u.key
		LEFT JOIN {beat} AS b ON b.namespace = l.namespace AND b.key = l.key AND b.token = l.token) AS x;
	-- The rows must exist before they are locked: two first grants of a
	-- key then queue on its row instead of both inserting.
	INSERT INTO {lock} AS l (namespace, key, token, fence, expires_at, beat_at, beat_every)
	SELECT u.ns, u.key, NULL, 0, clock_timestamp(), clock_timestamp(), interval '0'
	FROM unnest(p_ns, p_key, go) AS u(ns, key, go) WHERE u.go ORDER BY u.ns, u.key
	ON CONFLICT DO NOTHING;
	PERFORM 1 FROM unnest(p_ns, p_key, go) AS u(ns, key, go)
	JOIN {lock} AS l ON l.namespace = u.ns AND l.key = u.key
	WHERE u.go ORDER BY l.namespace, l.key FOR UPDATE OF l;
	t := clock_timestamp();
	WITH c AS (
		SELECT u.i, u.ns, u.key, u.token, u.lease_us, u.beat_us,
			CASE WHEN l.token IS NULL OR greatest(l.expires_at, b.expires_at) <= t THEN 1
				WHEN greatest(l.beat_at, b.beat_at) + 2 * l.beat_every >= t THEN 0
				ELSE 2 END AS how,
			greatest({clock_us}(t), l.fence + 1, coalesce(v.fence, 0) + 1) AS fence
		FROM unnest(p_ns, p_key, p_token, p_lease_us, p_beat_us, go)
			WITH ORDINALITY AS u(ns, key, token, lease_us, beat_us, go, i)
		JOIN {lock} AS l ON l.namespace = u.ns AND l.key = u.key
		LEFT JOIN {beat} AS b ON b.namespace = l.namespace AND b.key = l.key AND b.token = l.token
		LEFT JOIN {value} AS v ON v.namespace = u.ns AND v.key = u.key
		WHERE u.go
	), g AS (
		UPDATE {lock} AS l SET token = c.token, fence = c.fence,
			expires_at = t + c.lease_us * interval '1 microsecond',
			beat_at = t, beat_every = c.beat_us * interval '1 microsecond'
		FROM c WHERE c.how > 0 AND l.namespace = c.ns AND l.key = c.key
		RETURNING c.i, c.fence, c.how
	)
	SELECT array_agg(g.i), array_agg(g.fence), array_agg(g.how) INTO gi, gf, gh FROM g;
	fences := array_fill(0::bigint, ARRAY[n]);
	hows := array_fill(0, ARRAY[n]);
	FOR k IN 1..coalesce(array_length(gi, 1), 0) LOOP
		fences[gi[k]] := gf[k];
		hows[gi[k]] := gh[k];
	END LOOP;
	RETURN QUERY SELECT u.i::int, u.f, u.h FROM unnest(fences, hows) WITH ORDINALITY AS u(f, h, i);
END $$;

-- {acquire} is {acquire_many} of one key: key's lock for p_token, or
-- (0, 0) when a live holder has it. (Version 5.)
CREATE OR REPLACE FUNCTION {acquire}(p_ns text, p_key text, p_token text,
	p_lease_us bigint, p_beat_us bigint, OUT o_fence bigint, OUT o_how int)
LANGUAGE sql AS $$
	SELECT a.o_fence, a.o_how FROM {acquire_many}(ARRAY[p_ns], ARRAY[p_key], ARRAY[p_token],
		ARRAY[p_lease_us], ARRAY[p_beat_us]) AS a
$$;

-- {save_many} writes, for each i, a value under the fence rule: refused
-- when the stored value (still live) has a larger fence. With p_token[i]
-- it writes only while p_token[i] holds the key's lock (-1 otherwise:
-- nothing written, nothing released), and with p_release[i] it then
-- releases the lock and notifies p_channel[i], whether the fence rule let
-- the write through or not. It returns each i with 1 when stored, 0 when
-- refused. Its checks and writes are set operations over the keys, the
-- holders' rows locked in the order of the keys (as {acquire_many} does);
-- the saves of a key that appears more than once run in rounds, in the
-- order of i, as they would one after another. (Version 5.)
CREATE OR REPLACE FUNCTION {save_many}(p_ns text[], p_key text[], p_fence bigint[],
	p_data bytea[], p_ttl_us bigint[], p_token text[], p_release boolean[],
	p_channel text[], p_payload text[], OUT o_i int, OUT o_n int)
RETURNS SETOF record
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
	n      int := coalesce(array_length(p_key, 1), 0);
	rnd    int[]; -- rnd[i]: the how-manieth save of its key i is
	rounds int;
	go     boolean[]; -- go[i]: i is in this round and may write; NULL: not in it
	res    int[];
	si     int[];
	t      timestamptz;
BEGIN
	IF n = 0 THEN
		RETURN;
	END IF;
	PERFORM set_config('lock_timeout', {lock_wait}, true);
	SELECT array_agg(x.r ORDER BY x.i), max(x.r) INTO rnd, rounds FROM (
		SELECT u.i, row_number() OVER (PARTITION BY u.ns, u.key ORDER BY u.i)::int AS r
		FROM unnest(p_ns, p_key) WITH ORDINALITY AS u(ns, key, i)) AS x;
	res := array_fill(0, ARRAY[n]);
	FOR rd IN 1..rounds LOOP
		t := clock_timestamp();
		-- The holders' rows, locked in the order of the keys: a token
		-- that no longer holds its key's lock writes nothing.
		SELECT array_agg(x.ok ORDER BY x.i) INTO go FROM (
			SELECT u.i, CASE WHEN u.r <> rd THEN NULL WHEN coalesce(u.token, '') = '' THEN true
				ELSE coalesce((SELECT greatest(l.expires_at, (SELECT b.expires_at FROM {beat} AS b
					WHERE b.namespace = l.namespace AND b.key = l.key AND b.token = l.token)) > t
					FROM {lock} AS l WHERE l.namespace = u.ns AND l.key = u.key AND l.token = u.token
					FOR UPDATE), false) END AS ok
			FROM (SELECT * FROM unnest(p_ns, p_key, p_token, rnd) WITH ORDINALITY AS u(ns, key, token, r, i)
				ORDER BY u.ns, u.key, u.i OFFSET 0) AS u) AS x;
		WITH w AS (
			INSERT INTO {value} AS v (namespace, key, fence, data, until)
			SELECT u.ns, u.key, u.fence, u.data, t + u.ttl_us * interval '1 microsecond'
			FROM unnest(p_ns, p_key, p_fence, p_data, p_ttl_us, go) AS u(ns, key, fence, data, ttl_us, go)
			WHERE u.go AND u.ttl_us > 0 ORDER BY u.ns, u.key
			ON CONFLICT (namespace, key) DO UPDATE
			SET fence = excluded.fence, data = excluded.data, until = excluded.until
			WHERE v.until <= clock_timestamp() OR excluded.fence >= v.fence
			RETURNING v.namespace, v.key
		)
		SELECT array_agg(u.i) INTO si FROM w
		JOIN unnest(p_ns, p_key, go) WITH ORDINALITY AS u(ns, key, go, i)
			ON u.go AND u.ns = w.namespace AND u.key = w.key;
		UPDATE {lock} AS l SET token = NULL, expires_at = t
		FROM unnest(p_ns, p_key, p_token, p_release, go) AS u(ns, key, token, release, go)
		WHERE u.go AND u.token <> '' AND u.release AND l.namespace = u.ns AND l.key = u.key;
		PERFORM pg_notify(u.channel, u.payload)
		FROM unnest(p_ns, p_key, p_token, p_release, p_channel, p_payload, go) AS u(ns, key, token, release, channel, payload, go)
		WHERE u.go AND u.token <> '' AND u.release;
		FOR k IN 1..n LOOP
			IF NOT go[k] THEN
				res[k] := -1;
			END IF;
		END LOOP;
		FOR k IN 1..coalesce(array_length(si, 1), 0) LOOP
			res[si[k]] := 1;
		END LOOP;
	END LOOP;
	RETURN QUERY SELECT u.i::int, u.n FROM unnest(res) WITH ORDINALITY AS u(n, i);
END $$;

-- {save} is {save_many} of one key: 1 when stored, 0 when refused, -1
-- when p_token does not hold key's lock. (Version 5.)
CREATE OR REPLACE FUNCTION {save}(p_ns text, p_key text, p_fence bigint,
	p_data bytea, p_ttl_us bigint, p_token text, p_release boolean,
	p_channel text, p_payload text) RETURNS int
LANGUAGE sql AS $$
	SELECT s.o_n FROM {save_many}(ARRAY[p_ns], ARRAY[p_key], ARRAY[p_fence], ARRAY[p_data],
		ARRAY[p_ttl_us], ARRAY[p_token], ARRAY[p_release], ARRAY[p_channel], ARRAY[p_payload]) AS s
$$;

-- {next_fence} hands out a fence above every grant and write of key so
-- far, for a write made without the lock; with p_revoke it also ends the
-- current grant (and wakes key's waiters on p_channel).
CREATE OR REPLACE FUNCTION {next_fence}(p_ns text, p_key text, p_revoke boolean,
	p_channel text, p_payload text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	t   timestamptz;
	cur  {lock}%ROWTYPE;
	ends timestamptz;
	vf   bigint;
	f    bigint;
BEGIN
	PERFORM set_config('lock_timeout', {lock_wait}, true);
	INSERT INTO {lock} AS l (namespace, key, token, fence, expires_at, beat_at, beat_every)
	VALUES (p_ns, p_key, NULL, 0, clock_timestamp(), clock_timestamp(), interval '0')
	ON CONFLICT DO NOTHING;
	SELECT * INTO cur FROM {lock} AS l WHERE l.namespace = p_ns AND l.key = p_key FOR UPDATE;
	SELECT le.o_expires INTO ends FROM {lease}(p_ns, p_key, cur.token, cur.expires_at, cur.beat_at) AS le;
	t := clock_timestamp();
	SELECT v.fence INTO vf FROM {value} AS v WHERE v.namespace = p_ns AND v.key = p_key;
	f := greatest({clock_us}(t), cur.fence + 1, coalesce(vf, 0) + 1);
	IF p_revoke OR cur.token IS NULL OR ends <= t THEN
		-- The row's retention counts from its last fence.
		UPDATE {lock} AS l SET fence = f, token = NULL, expires_at = t
		WHERE l.namespace = p_ns AND l.key = p_key;
	ELSE
		UPDATE {lock} AS l SET fence = f WHERE l.namespace = p_ns AND l.key = p_key;
	END IF;
	IF p_revoke AND cur.token IS NOT NULL AND ends > t THEN
		PERFORM pg_notify(p_channel, p_payload);
	END IF;
	RETURN f;
END $$;

-- {extend_many} resets the leases of the holders p_token[i] of the keys
-- (p_ns[i], p_key[i]) to p_ttl_us[i] from now, and records their beats,
-- in {beat}: the beats of one process, in one statement, one key after
-- another in the order of the keys (one index lookup each, whatever the
-- plan: a join planned while the table was empty scans it whole once it
-- is large). It reads {lock} without locking it, so that the holders'
-- saves and releases, and other processes' acquires, never wait for a
-- beat. It returns the i of each lease extended; the others are no
-- longer held. (Version 4.)
CREATE OR REPLACE FUNCTION {extend_many}(p_ns text[], p_key text[],
	p_token text[], p_ttl_us bigint[], OUT o_i int)
RETURNS SETOF int
LANGUAGE plpgsql AS $$
DECLARE
	r   record;
	cur {lock}%ROWTYPE;
	t   timestamptz;
BEGIN
	PERFORM set_config('lock_timeout', {lock_wait}, true);
	FOR r IN SELECT * FROM unnest(p_ns, p_key, p_token, p_ttl_us)
		WITH ORDINALITY AS u(ns, key, token, ttl_us, i) ORDER BY u.ns, u.key, u.i
	LOOP
		SELECT * INTO cur FROM {lock} AS l WHERE l.namespace = r.ns AND l.key = r.key AND l.token = r.token;
		CONTINUE WHEN NOT FOUND;
		t := clock_timestamp();
		CONTINUE WHEN cur.expires_at <= t AND
			(SELECT le.o_expires FROM {lease}(r.ns, r.key, r.token, cur.expires_at, cur.beat_at) AS le) <= t;
		INSERT INTO {beat} AS b (namespace, key, token, expires_at, beat_at)
		VALUES (r.ns, r.key, r.token, t + r.ttl_us * interval '1 microsecond', t)
		ON CONFLICT (namespace, key) DO UPDATE
		SET token = excluded.token, expires_at = excluded.expires_at, beat_at = excluded.beat_at;
		o_i := r.i;
		RETURN NEXT;
	END LOOP;
END $$;

COMMENT ON TABLE {lock} IS {version};
